/* test_config.c — the run config: the contract example, defaults, a table of bad configs each with the
 * key path its message must start with (unknown and misplaced keys at every level, duplicates, wrong
 * types, both sides of every range edge, integer and float overflow, deep nesting, syntax errors,
 * invalid UTF-8, \u0000), canonical JSON round trips, path resolution, the 1 MiB cap, the --towers
 * override and every example in examples/. JSON in the tables is written with ' for " (see json_of). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "testutil.h"
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "config.h"

/* A copy of s with every ' turned into " (caller frees). */
static char *json_of(const char *s)
{
    char *t = strdup(s);
    assert_non_null(t);
    for (char *p = t; *p; p++)
        if (*p == '\'')
            *p = '"';
    return t;
}

static tw_status parse_text(const char *single_quoted, const char *base_dir, tw_config *c,
                            tw_error *err)
{
    char *text = json_of(single_quoted);
    tw_status st = tw_config_parse(text, strlen(text), base_dir, c, err);
    free(text);
    return st;
}

/* Whether text is refused as invalid with a message that starts with "<path>: " and, when `contains`
 * is given, holds it; prints what went wrong when not. */
static int refused_as(const char *text, size_t len, const char *path, const char *contains)
{
    tw_config c;
    tw_error err;
    tw_error_clear(&err);
    tw_status st = tw_config_parse(text, len, NULL, &c, &err);
    size_t n = strlen(path);
    int ok = st == TW_ERR_INVALID && strncmp(err.message, path, n) == 0 &&
             strncmp(err.message + n, ": ", 2) == 0 && (!contains || strstr(err.message, contains));
    if (!ok)
        print_error("config %.200s\n  status %d, message '%s'\n  expected '%s: ...%s'\n", text,
                    (int)st, err.message, path, contains ? contains : "");
    return ok;
}

static void expect_error(const char *text, size_t len, const char *path, const char *contains)
{
    assert_true(refused_as(text, len, path, contains));
}

#define DATASET "'dataset':{'train':'t','shape':[784]}"
#define DENSE10 "{'type':'dense','units':10}"
#define BASE "{" DATASET ",'model':{'layers':[" DENSE10 "]}"
#define TOP(x) BASE "," x "}"
#define DS(x) "{'dataset':{'train':'t','shape':[784]," x "},'model':{'layers':[" DENSE10 "]}}"
#define LAYERS(x) "{" DATASET ",'model':{'layers':[" x "]}}"
#define LAYER(x) LAYERS("{" x "}," DENSE10)
#define OPT(x) TOP("'optimizer':{" x "}")
#define DECAY(x) TOP("'lr_decay':{" x "}")
#define EXP "'type':'exponential','decay_steps':10,'decay_rate':0.9"

typedef struct {
    const char *json;     /* single-quoted */
    const char *path;     /* the message starts with "<path>: " */
    const char *contains; /* and holds this, when not NULL */
} bad_case;

static const bad_case BAD[] = {
    /* unknown keys, at every level */
    {TOP("'stepz':5"), "stepz", "unknown key (did you mean 'steps'?)"},
    {DS("'trian':'x'"), "dataset.trian", "did you mean 'train'"},
    {"{" DATASET ",'model':{'layers':[" DENSE10 "],'optimizer':{}}}", "model.optimizer",
     "expected one of: layers"},
    {OPT("'lr':0.1"), "optimizer.lr", "unknown key"},
    {DECAY(EXP ",'steps':5"), "lr_decay.steps", "unknown key"},
    {LAYER("'type':'dense','units':10,'weight_init':{'type':'truncated_normal','mean':0}"),
     "model.layers[0].weight_init.mean", "unknown key"},
    /* keys the object's type does not use */
    {LAYER("'type':'flatten','units':3"), "model.layers[0].units", "not used by type 'flatten'"},
    {OPT("'type':'sgd','momentum':0.9"), "optimizer.momentum", "not used by type 'sgd'"},
    {OPT("'beta1':0.9"), "optimizer.beta1", "not used by type 'sgd'"},
    {LAYER("'type':'dense','units':5,'bias_init':{'type':'zeros','stddev':0.1}"),
     "model.layers[0].bias_init.stddev", "not used by type 'zeros'"},
    {LAYER("'type':'max_pool2d','pool':2,'units':5"), "model.layers[0].units", "not used"},
    {LAYER("'type':'max_pool2d','pool':2,'momentum':0.9"), "model.layers[0].momentum", "not used"},
    /* graphs: inputs name earlier layers (or the model's input); add and concat read two or more */
    {LAYERS("{'type':'dense','units':4,'name':'a'},{'type':'add','inputs':['a','b']}"), "model.layers[1].inputs[1]",
     "no layer before this one is named 'b' (or 'input', the model's input)"},
    {LAYERS("{'type':'dense','units':4,'name':'a','inputs':['a']}"), "model.layers[0].inputs[0]",
     "no layer before this one is named 'a'"},
    {LAYERS("{'type':'dense','units':4,'name':'a'},{'type':'add','inputs':['a']}"), "model.layers[1].inputs",
     "add reads 2 or more layers: name them"},
    {LAYERS("{'type':'dense','units':4,'name':'a'},{'type':'dense','units':2,'inputs':['a','input']}"),
     "model.layers[1].inputs", "dense reads one layer, got 2"},
    {LAYERS("{'type':'dense','units':4,'name':'input'}"), "model.layers[0].name", "'input' names the model's input"},
    {LAYERS("{'type':'batch_norm','momentum':1}," DENSE10), "model.layers[0].momentum", "must be in [0, 1)"},
    {"{'dataset':{'train':'t','shape':[4,4,3],'normalize':{'mean':[0.5,0.5],'std':[1]}},'model':{'layers':["
     DENSE10 "]}}", "dataset.normalize.mean", "must have 1 entry or one per channel (the shape's last axis: 3), got 2"},
    {"{'dataset':{'train':'t','shape':[4,4,3],'normalize':{'mean':[0.5],'std':[0]}},'model':{'layers':["
     DENSE10 "]}}", "dataset.normalize.std[0]", "must be > 0"},
    {"{'dataset':{'train':'t','shape':[784],'augment':{'horizontal_flip':true}},'model':{'layers':[" DENSE10 "]}}",
     "dataset.augment", "needs images"},
    {LAYERS("{'type':'batch_norm','epsilon':0}," DENSE10), "model.layers[0].epsilon", NULL},
    {LAYERS("{'type':'add','inputs':['input','input','input','input','input']}," DENSE10), "model.layers[0].inputs",
     "must have 1 to 4 entries, got 5"},
    {LAYER("'type':'dense','units':5,'rate':0.5"), "model.layers[0].rate", "not used"},
    /* duplicates */
    {TOP("'steps':5,'steps':6"), "steps", "duplicate key"},
    {LAYER("'type':'dense','units':10,'units':10"), "model.layers[0].units", "duplicate key"},
    {DS("'scale':0.5,'scale':0.5"), "dataset.scale", "duplicate key"},
    /* wrong types */
    {TOP("'steps':'100'"), "steps", "must be an integer, got '100'"},
    {TOP("'steps':1.5"), "steps", "must be an integer, got 1.5"},
    {TOP("'steps':100.0"), "steps", "must be an integer, got 100.0"},
    {TOP("'batch_size':true"), "batch_size", "must be an integer, got true"},
    {OPT("'learning_rate':true"), "optimizer.learning_rate", "must be a number, got true"},
    {OPT("'learning_rate':'0.1'"), "optimizer.learning_rate", "must be a number"},
    {TOP("'loss':5"), "loss", "must be a string"},
    {TOP("'optimizer':'adam'"), "optimizer", "must be an object"},
    {DECAY("'type':'exponential','decay_steps':10,'decay_rate':0.9,'staircase':1"),
     "lr_decay.staircase", "must be true or false"},
    {"{'dataset':[]," "'model':{'layers':[" DENSE10 "]}}", "dataset", "must be an object"},
    {"{" DATASET ",'model':{'layers':{}}}", "model.layers", "must be an array"},
    {"{" DATASET ",'model':null}", "model", "must be an object, got null"},
    {LAYER("'type':'dense','units':10,'name':7"), "model.layers[0].name", "must be a string"},
    {DS("'test':5"), "dataset.test", "must be a string"},
    {"{'dataset':{'train':'t','shape':'784'},'model':{'layers':[" DENSE10 "]}}", "dataset.shape",
     "must be an array of 1 to 4 integers, got '784'"},
    {LAYER("'type':'dense','units':[10]"), "model.layers[0].units", "must be an integer"},
    {LAYER("'type':null"), "model.layers[0].type", "must be a string"},
    {LAYERS("7"), "model.layers[0]", "must be an object"},
    /* integer and float overflow */
    {LAYER("'type':'dense','units':2147483648"), "model.layers[0].units", "got 2147483648"},
    {TOP("'seed':9223372036854775808"), "seed", "number out of range"},
    {TOP("'steps':-9223372036854775809"), "steps", "number out of range"},
    {TOP("'seed':-1"), "seed", "must be >= 0, got -1"},
    {DS("'scale':1e400"), "dataset.scale", "number out of range"},
    {DS("'scale':1e39"), "dataset.scale", "32-bit float"},
    {OPT("'learning_rate':1e-50"), "optimizer.learning_rate", "must be > 0, got 1e-50"},
    {TOP("'l2':-1e400"), "l2", "number out of range"},
    /* every range, just outside (the good table holds just inside) */
    {OPT("'learning_rate':-1"), "optimizer.learning_rate", "must be > 0, got -1"},
    {OPT("'learning_rate':0"), "optimizer.learning_rate", "must be > 0"},
    {OPT("'type':'momentum','momentum':1"), "optimizer.momentum", "must be in [0, 1), got 1"},
    {OPT("'type':'momentum','momentum':-0.1"), "optimizer.momentum", NULL},
    {OPT("'type':'adam','beta1':1"), "optimizer.beta1", NULL},
    {OPT("'type':'adam','beta2':-0.5"), "optimizer.beta2", NULL},
    {OPT("'type':'adam','epsilon':0"), "optimizer.epsilon", "must be > 0"},
    {LAYER("'type':'dense','units':0"), "model.layers[0].units", "must be in [1, 65536], got 0"},
    {LAYER("'type':'dense','units':65537"), "model.layers[0].units", "got 65537"},
    {LAYER("'type':'conv2d','filters':0,'kernel':3"), "model.layers[0].filters", NULL},
    {LAYER("'type':'conv2d','filters':4097,'kernel':3"), "model.layers[0].filters",
     "must be in [1, 4096]"},
    {LAYER("'type':'conv2d','filters':8,'kernel':0"), "model.layers[0].kernel", NULL},
    {LAYER("'type':'conv2d','filters':8,'kernel':65"), "model.layers[0].kernel",
     "must be in [1, 64]"},
    {LAYER("'type':'conv2d','filters':8,'kernel':[3,0]"), "model.layers[0].kernel[1]", "got 0"},
    {LAYER("'type':'conv2d','filters':8,'kernel':[3,3,3]"), "model.layers[0].kernel",
     "an array of 2 integers, got an array of 3"},
    {LAYER("'type':'conv3d','filters':8,'kernel':[3,3]"), "model.layers[0].kernel",
     "an array of 3 integers"},
    {LAYER("'type':'conv2d','filters':8,'kernel':3,'strides':0"), "model.layers[0].strides",
     NULL},
    {LAYER("'type':'max_pool3d','pool':2,'strides':[1,2,65]"), "model.layers[0].strides[2]",
     NULL},
    {LAYER("'type':'max_pool2d','pool':0"), "model.layers[0].pool", NULL},
    {LAYER("'type':'dropout','rate':1"), "model.layers[0].rate", "must be in [0, 1), got 1"},
    {LAYER("'type':'dropout','rate':-0.1"), "model.layers[0].rate", NULL},
    {LAYER("'type':'dense','units':5,'weight_init':{'type':'truncated_normal','stddev':0}"),
     "model.layers[0].weight_init.stddev", "must be > 0"},
    {LAYER("'type':'dense','units':5,'bias_init':{'type':'constant','value':1e39}"),
     "model.layers[0].bias_init.value", "32-bit float"},
    {DECAY("'type':'exponential','decay_steps':0,'decay_rate':0.9"), "lr_decay.decay_steps",
     "must be >= 1, got 0"},
    {DECAY("'type':'exponential','decay_steps':10,'decay_rate':0"), "lr_decay.decay_rate",
     "must be in (0, 1], got 0"},
    {DECAY("'type':'exponential','decay_steps':10,'decay_rate':1.0000001"),
     "lr_decay.decay_rate", NULL},
    {TOP("'l2':-1e-9"), "l2", "must be >= 0"},
    {TOP("'ema_decay':1"), "ema_decay", "must be in [0, 1)"},
    {TOP("'ema_decay':-0.01"), "ema_decay", NULL},
    {TOP("'batch_size':0"), "batch_size", NULL},
    {TOP("'batch_size':65537"), "batch_size", "must be in [1, 65536]"},
    {TOP("'towers':0"), "towers", NULL},
    {TOP("'towers':65"), "towers", "must be in [1, 64]"},
    {TOP("'steps':0"), "steps", NULL},
    {TOP("'steps':1000000001"), "steps", "must be in [1, 1000000000]"},
    {TOP("'summary_every':0"), "summary_every", "must be >= 1"},
    {TOP("'eval_every':-1"), "eval_every", "must be >= 0"},
    {TOP("'checkpoint_every':-1"), "checkpoint_every", "must be >= 0"},
    {TOP("'keep_checkpoints':0"), "keep_checkpoints", NULL},
    {TOP("'keep_checkpoints':1001"), "keep_checkpoints", "must be in [1, 1000]"},
    {TOP("'input_memory_bytes':-1"), "input_memory_bytes", NULL},
    {TOP("'cuda_graphs':1"), "cuda_graphs", "must be true or false"},
    {TOP("'cuda_graphs':null"), "cuda_graphs", NULL},
    {TOP("'tf32':'yes'"), "tf32", "must be true or false"},
    {TOP("'winograd':1"), "winograd", "must be true or false"},
    {TOP("'tf33':true"), "tf33", "unknown key"},
    {TOP("'cuda_graph':false"), "cuda_graph", "unknown key (did you mean 'cuda_graphs'?)"},
    {DS("'shuffle_buffer':0"), "dataset.shuffle_buffer", NULL},
    {DS("'shuffle_buffer':10000001"), "dataset.shuffle_buffer", NULL},
    {DS("'scale':0"), "dataset.scale", "must be > 0"},
    {DS("'scale':-1"), "dataset.scale", NULL},
    {"{'dataset':{'train':'t','shape':[]},'model':{'layers':[" DENSE10 "]}}", "dataset.shape",
     "1 to 4 entries, got 0"},
    {"{'dataset':{'train':'t','shape':[1,2,3,4,5]},'model':{'layers':[" DENSE10 "]}}",
     "dataset.shape", "got 5"},
    {"{'dataset':{'train':'t','shape':[0]},'model':{'layers':[" DENSE10 "]}}",
     "dataset.shape[0]", NULL},
    {"{'dataset':{'train':'t','shape':[28,65537]},'model':{'layers':[" DENSE10 "]}}",
     "dataset.shape[1]", "must be in [1, 65536]"},
    {"{" DATASET ",'model':{'layers':[]}}", "model.layers", "1 to 64 layers, got 0"},
    /* required keys */
    {"{'model':{'layers':[" DENSE10 "]}}", "dataset", "is required"},
    {"{" DATASET "}", "model", "is required"},
    {"{'dataset':{'shape':[784]},'model':{'layers':[" DENSE10 "]}}", "dataset.train",
     "is required"},
    {"{'dataset':{'train':'t'},'model':{'layers':[" DENSE10 "]}}", "dataset.shape", NULL},
    {LAYERS("{'type':'dense'}"), "model.layers[0].units", "is required for type 'dense'"},
    {LAYER("'type':'conv2d','filters':3"), "model.layers[0].kernel", "required"},
    {LAYER("'type':'max_pool2d'"), "model.layers[0].pool", "required for type 'max_pool2d'"},
    {LAYER("'type':'dropout'"), "model.layers[0].rate", "required"},
    {LAYERS("{'units':10}"), "model.layers[0].type", "is required"},
    {LAYER("'type':'dense','units':5,'weight_init':{}"), "model.layers[0].weight_init.type",
     "is required"},
    {DECAY("'type':'exponential','decay_steps':10"), "lr_decay.decay_rate", "required"},
    {DECAY("'decay_steps':10,'decay_rate':0.5"), "lr_decay.type", "required"},
    /* enumerations */
    {LAYERS("{'type':'dens','units':10}"), "model.layers[0].type",
     "unknown value 'dens' (did you mean 'dense'?)"},
    {LAYER("'type':'dense','units':10,'activation':'swish'"), "model.layers[0].activation",
     "expected one of: linear, relu, tanh, sigmoid"},
    {TOP("'loss':'xent'"), "loss", "unknown value 'xent'"},
    {OPT("'type':'rmsprop'"), "optimizer.type", "unknown value 'rmsprop'"},
    {LAYER("'type':'conv2d','filters':8,'kernel':3,'padding':'full'"), "model.layers[0].padding",
     NULL},
    {LAYER("'type':'dense','units':5,'weight_init':{'type':'he'}"),
     "model.layers[0].weight_init.type", NULL},
    {OPT("'type':'adam','nesterov':true"), "optimizer.nesterov", NULL},
    {OPT("'type':'adam','weight_decay':1.5"), "optimizer.weight_decay", "must be in [0, 1]"},
    {OPT("'type':'sgd','global_clipnorm':-1"), "optimizer.global_clipnorm", ">= 0"},
    {TOP("'label_smoothing':1"), "label_smoothing", "must be in [0, 1)"},
    {TOP("'loss':'mean_squared_error','label_smoothing':0.1"), "label_smoothing",
     "needs the loss softmax_cross_entropy, not mean_squared_error"},
    {DECAY("'type':'linear','decay_steps':10"), "lr_decay.type",
     "expected one of: exponential, cosine, piecewise)"},
    {DECAY("'type':'cosine','decay_steps':10,'decay_rate':0.5"), "lr_decay.decay_rate", NULL},
    {DECAY("'type':'cosine','decay_steps':10,'alpha':1.5"), "lr_decay.alpha", "must be in [0, 1]"},
    {DECAY("'type':'cosine','decay_steps':10,'warmup_steps':-1"), "lr_decay.warmup_steps", ">= 0"},
    {DECAY("'type':'piecewise','boundaries':[10,5],'factors':[1,0.1,0.01]"), "lr_decay.boundaries[1]",
     "must be greater than the entry before it (10), got 5"},
    {DECAY("'type':'piecewise','boundaries':[10],'factors':[1]"), "lr_decay.factors",
     "must have one entry more than lr_decay.boundaries (1), got 1"},
    {DECAY("'type':'piecewise','boundaries':[10],'factors':[1,0]"), "lr_decay.factors[1]", "must be > 0"},
    {DECAY("'type':'piecewise','boundaries':10,'factors':[1,0.1]"), "lr_decay.boundaries",
     "must be an array of steps"},
    {DECAY("'type':'piecewise','boundaries':[],'factors':[]"), "lr_decay.factors",
     "must have 1 to 16 entries, got 0"},
    {DECAY("'type':'piecewise','factors':[1]"), "lr_decay.boundaries", "required"},
    /* names, features and paths */
    {LAYER("'type':'dense','units':10,'name':'a b'"), "model.layers[0].name",
     "must be letters, digits and _ - . /"},
    {LAYER("'type':'dense','units':10,'name':'_a'"), "model.layers[0].name", NULL},
    {LAYER("'type':'dense','units':10,'name':'a//b'"), "model.layers[0].name", NULL},
    {LAYER("'type':'dense','units':10,'name':'a/'"), "model.layers[0].name", NULL},
    {LAYER("'type':'dense','units':10,'name':'a/-b'"), "model.layers[0].name", NULL},
    {LAYER("'type':'dense','units':10,'name':''"), "model.layers[0].name", "1 to 63 bytes"},
    {LAYER("'type':'dense','units':10,'name':"
           "'a123456789012345678901234567890123456789012345678901234567890123'"),
     "model.layers[0].name", "got 64"},
    {LAYERS("{'type':'dense','units':10,'name':'x'},{'type':'dense','units':10,'name':'x'}"),
     "model.layers[1].name", "'x' is already the name of model.layers[0]"},
    {LAYERS("{'type':'dense','units':10,'name':'layer2'}," DENSE10), "model.layers[1].name",
     "the default name 'layer2' is already the name of model.layers[0]"},
    {LAYERS(DENSE10 ",{'type':'dense','units':10,'name':'layer1'}"), "model.layers[1].name",
     ": 'layer1' is already the name of model.layers[0]"},
    {DS("'image_feature':''"), "dataset.image_feature", NULL},
    {DS("'label_feature':'a\\u0001b'"), "dataset.label_feature", "control characters"},
    {DS("'test':''"), "dataset.test", "must not be empty"},
    {"{'dataset':{'train':'','shape':[784]},'model':{'layers':[" DENSE10 "]}}",
     "dataset.train", "must not be empty"},
    /* text that is not a config */
    {TOP("'steps':5") " x", "config", "invalid JSON"},
    {TOP("'steps':5") "{}", "config", "invalid JSON"},
    {"[1]", "config", "must be an object, got an array"},
    {"", "config", "invalid JSON"},
    {"'x'", "config", "invalid JSON"},
    {"{'dataset':", "dataset", "invalid JSON"},
    {"{'dataset':{'train':'t','shape':[784,]}}", "dataset.shape", "invalid JSON"},
    {"{'dataset':{'train':'t','shape':[784,'a}}", "dataset.shape[1]", "invalid JSON"},
    {DS("'image_feature':'a\\u0000b'"), "dataset.image_feature", "\\u0000 is not allowed"},
    {DS("'image_feature':'\xff'"), "dataset.image_feature", "invalid UTF-8"},
    {DS("'image_feature':'\xc3\x28'"), "dataset.image_feature", "invalid UTF-8"},
};

static void test_bad_configs(void **state)
{
    (void)state;
    int failed = 0;
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        char *text = json_of(BAD[i].json);
        failed += !refused_as(text, strlen(text), BAD[i].path, BAD[i].contains);
        free(text);
    }
    assert_int_equal(failed, 0);
}

/* Configs just inside every range edge, and other unusual but valid forms. */
static const char *const GOOD[] = {
    LAYER("'type':'dense','units':1"),
    LAYER("'type':'dense','units':65536"),
    LAYER("'type':'conv2d','filters':4096,'kernel':64,'strides':64,'padding':'valid'"),
    LAYER("'type':'conv2d','filters':1,'kernel':[1,64],'strides':[64,1]"),
    LAYER("'type':'conv3d','filters':1,'kernel':[1,2,3],'strides':[3,2,1]"),
    LAYER("'type':'max_pool3d','pool':64"),
    LAYER("'type':'dropout','rate':0"),
    LAYER("'type':'dropout','rate':0.99999"),
    LAYER("'type':'dense','units':5,'name':"
          "'a12345678901234567890123456789012345678901234567890123456789012'"),
    LAYER("'type':'dense','units':5,'name':'Az09_-.x/9b/c'"),
    LAYER("'type':'dense','units':5,'name':'7'"),
    LAYER("'type':'dense','units':5,'weight_init':{'type':'constant','value':-3e38}"),
    OPT("'learning_rate':1e-30"),
    OPT("'learning_rate':3e38"),
    OPT("'type':'momentum','momentum':0"),
    OPT("'type':'adam','beta1':0,'beta2':0.99999,'epsilon':1e-30"),
    DECAY("'type':'exponential','decay_steps':1,'decay_rate':1,'staircase':true"),
    DECAY("'type':'exponential','decay_steps':9223372036854775807,'decay_rate':1e-30"),
    TOP("'lr_decay':null"),
    TOP("'l2':0,'ema_decay':0"),
    TOP("'ema_decay':0.99999"),
    TOP("'batch_size':1,'towers':1,'steps':1,'keep_checkpoints':1"),
    TOP("'batch_size':65536,'towers':64,'steps':1000000000,'keep_checkpoints':1000"),
    TOP("'seed':0"),
    TOP("'cuda_graphs':false,'tf32':true"),
    TOP("'cuda_graphs':true,'tf32':false"),
    TOP("'winograd':true"),
    TOP("'seed':9223372036854775807"),
    TOP("'summary_every':1,'eval_every':1,'checkpoint_every':9223372036854775807"),
    DS("'shuffle_buffer':1"),
    DS("'shuffle_buffer':10000000,'scale':3e38"),
    DS("'test':null"),
    "{'dataset':{'train':'t','shape':[65536,1,1,1]},'model':{'layers':[" DENSE10 "]}}",
    " \n\t{'dataset':{'train':'t','shape':[1]},'model':{'layers':[" DENSE10 "]}}\n ",
};

static void test_good_edges(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof GOOD / sizeof *GOOD; i++) {
        tw_config c;
        tw_error err;
        tw_error_clear(&err);
        tw_status st = parse_text(GOOD[i], NULL, &c, &err);
        if (st != TW_OK)
            print_error("config %s\n  refused: %s\n", GOOD[i], err.message);
        assert_int_equal(st, TW_OK);
    }
}

static void test_exact_messages(void **state)
{
    (void)state;
    tw_config c;
    tw_error err;
    assert_int_equal(parse_text(LAYERS("{'type':'flatten'},{'type':'dense','units':500},"
                                       "{'type':'dense','unit':10}"),
                                NULL, &c, &err),
                     TW_ERR_INVALID);
    assert_string_equal(err.message, "model.layers[2].unit: unknown key (did you mean 'units'?)");
    assert_int_equal(err.status, TW_ERR_INVALID);
    assert_int_equal(parse_text(OPT("'learning_rate':-1"), NULL, &c, &err), TW_ERR_INVALID);
    assert_string_equal(err.message, "optimizer.learning_rate: must be > 0, got -1");
}

static void test_too_many_layers(void **state)
{
    (void)state;
    char text[8192] = "{" DATASET ",'model':{'layers':[";
    for (int i = 0; i < TW_MAX_LAYERS + 1; i++)
        strcat(text, i ? ",{'type':'flatten'}" : "{'type':'flatten'}");
    strcat(text, "]}}");
    char *json = json_of(text);
    expect_error(json, strlen(json), "model.layers", "1 to 64 layers, got 65");
    free(json);
}

/* "<prefix>" followed by n times "[0]". */
static void indexed_path(char *out, size_t size, const char *prefix, int n)
{
    size_t k = (size_t)snprintf(out, size, "%s", prefix);
    for (int i = 0; i < n && k + 4 <= size; i++, k += 3)
        memcpy(out + k, "[0]", 4);
}

/* 10,000 nested arrays, as a whole document and as a value: a clean error naming where, no deep
 * recursion; 32 levels are fine. */
static void test_deep_nesting(void **state)
{
    (void)state;
    size_t n = 10000;
    char *text = malloc(2 * n + 200), path[200];
    assert_non_null(text);
    memset(text, '[', n);
    memset(text + n, ']', n);
    indexed_path(path, sizeof path, "", 32);
    expect_error(text, 2 * n, path, "nested deeper than 32 levels");
    int k = snprintf(text, 200, "{\"dataset\": {\"train\": \"t\", \"shape\": ");
    memset(text + k, '[', n);
    indexed_path(path, sizeof path, "dataset.shape", 30);
    expect_error(text, (size_t)k + n, path, "nested deeper");
    /* 32 levels: decoded, and refused for what it is */
    k = snprintf(text, 200, "{\"dataset\": {\"train\": \"t\", \"shape\": ");
    memset(text + k, '[', 30);
    memset(text + k + 30, ']', 30);
    snprintf(text + k + 60, 100, "}}");
    expect_error(text, strlen(text), "dataset.shape[0]", "must be an integer, got an array");
    free(text);
}

/* Long paths: a path at the cap, one past it, and one that only the base folder pushes past it. */
static void test_path_length(void **state)
{
    (void)state;
    char *long_path = malloc(TW_PATH_BYTES + 1);
    assert_non_null(long_path);
    memset(long_path, 'a', TW_PATH_BYTES);
    char *text = malloc(2 * TW_PATH_BYTES);
    assert_non_null(text);
    tw_config c;
    tw_error err;
    for (int len = TW_PATH_BYTES - 1; len <= TW_PATH_BYTES; len++) {
        snprintf(text, 2 * TW_PATH_BYTES,
                 "{\"dataset\":{\"train\":\"%.*s\",\"shape\":[1]},\"model\":{\"layers\":[{\"type\":"
                 "\"flatten\"}]}}",
                 len, long_path);
        tw_status st = tw_config_parse(text, strlen(text), NULL, &c, &err);
        assert_int_equal(st, len < TW_PATH_BYTES ? TW_OK : TW_ERR_INVALID);
        if (st == TW_OK)
            assert_int_equal(strlen(c.train_path), TW_PATH_BYTES - 1);
        else
            assert_string_equal(err.message, "dataset.train: path longer than 4095 bytes");
    }
    snprintf(text, 2 * TW_PATH_BYTES,
             "{\"dataset\":{\"train\":\"%.*s\",\"shape\":[1]},\"model\":{\"layers\":[{\"type\":"
             "\"flatten\"}]}}",
             TW_PATH_BYTES - 3, long_path);
    assert_int_equal(tw_config_parse(text, strlen(text), "/d", &c, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "dataset.train: path longer"));
    free(text);
    free(long_path);
}

static const char CONTRACT[] =
    "{'dataset': {'train': 'train.tfrecord', 'test': 'test.tfrecord', 'image_feature': 'image_raw',"
    "             'label_feature': 'label', 'shape': [28, 28, 1], 'scale': 0.00392156862745098},"
    " 'model': {'layers': [{'type': 'flatten'}, {'type': 'dense', 'units': 500, 'activation': "
    "'relu'},"
    "                      {'type': 'dense', 'units': 10}]},"
    " 'loss': 'softmax_cross_entropy',"
    " 'optimizer': {'type': 'sgd', 'learning_rate': 0.001},"
    " 'lr_decay': {'type': 'exponential', 'decay_steps': 1718, 'decay_rate': 0.99, 'staircase': "
    "false},"
    " 'l2': 0.0001, 'ema_decay': 0.99, 'batch_size': 32, 'towers': 1, 'steps': 30000, 'seed': 1,"
    " 'summary_every': 1000, 'eval_every': 5000, 'checkpoint_every': 5000, 'keep_checkpoints': 5}";

static void assert_dense(const tw_layer_config *l, int units, tw_activation act, const char *name)
{
    assert_int_equal(l->type, TW_LAYER_DENSE);
    assert_int_equal(l->units, units);
    assert_int_equal(l->activation, act);
    assert_string_equal(l->name, name);
    assert_int_equal(l->weight_init.kind, TW_INIT_TRUNCATED_NORMAL);
    assert_true(l->weight_init.stddev == 0.1f);
}

static void test_contract_example(void **state)
{
    (void)state;
    tw_config c;
    tw_error err;
    assert_int_equal(parse_text(CONTRACT, "/data/run", &c, &err), TW_OK);
    assert_string_equal(c.train_path, "/data/run/train.tfrecord");
    assert_string_equal(c.test_path, "/data/run/test.tfrecord");
    assert_string_equal(c.image_feature, "image_raw");
    assert_string_equal(c.label_feature, "label");
    assert_int_equal(c.rank, 3);
    assert_int_equal(c.shape[0], 28);
    assert_int_equal(c.shape[1], 28);
    assert_int_equal(c.shape[2], 1);
    assert_true(c.scale == (float)0.00392156862745098);
    assert_int_equal(c.n_layers, 3);
    assert_int_equal(c.layers[0].type, TW_LAYER_FLATTEN);
    assert_string_equal(c.layers[0].name, "flatten_0"); /* a layer without variables: its type and index */
    assert_dense(&c.layers[1], 500, TW_ACT_RELU, "layer1");
    assert_dense(&c.layers[2], 10, TW_ACT_NONE, "layer2");
    assert_int_equal(c.layers[2].bias_init.kind, TW_INIT_ZEROS);
    assert_int_equal(c.loss, TW_LOSS_SOFTMAX_XENT);
    assert_int_equal(c.optimizer, TW_OPT_SGD);
    assert_true(c.learning_rate == 0.001f);
    assert_int_equal(c.lr_decay, 1);
    assert_int_equal(c.decay_steps, 1718);
    assert_true(c.decay_rate == 0.99f);
    assert_int_equal(c.staircase, 0);
    assert_true(c.l2 == 0.0001f);
    assert_true(c.ema_decay == 0.99f);
    assert_int_equal(c.batch_size, 32);
    assert_int_equal(c.towers, 1);
    assert_int_equal(c.steps, 30000);
    assert_int_equal(c.seed, 1);
    assert_int_equal(c.summary_every, 1000);
    assert_int_equal(c.eval_every, 5000);
    assert_int_equal(c.checkpoint_every, 5000);
    assert_int_equal(c.keep_checkpoints, 5);
    assert_int_equal(c.shuffle_buffer, 10000);
}

/* tw_config_decode (a document already decoded, as the server has it) gives what tw_config_parse gives
 * for its text: the same config, and the same error naming the same key, nesting included. */
static void test_decode_document(void **state)
{
    (void)state;
    static tw_config a, b;
    tw_error ea, eb;
    char *text = json_of(CONTRACT);
    json_t *doc = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
    assert_non_null(doc);
    assert_int_equal(tw_config_parse(text, strlen(text), "/data/run", &a, &ea), TW_OK);
    assert_int_equal(tw_config_decode(doc, "/data/run", &b, &eb), TW_OK);
    char *ja = tw_config_to_json(&a), *jb = tw_config_to_json(&b);
    assert_string_equal(ja, jb);
    free(ja);
    free(jb);
    json_decref(doc);
    free(text);
    static const char *const bad[] = {LAYER("'type':'dense','units':0"), DS("'shape':[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                                                                          "1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]")};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        text = json_of(bad[i]);
        doc = json_loads(text, 0, NULL);
        assert_non_null(doc);
        assert_int_equal(tw_config_parse(text, strlen(text), NULL, &a, &ea), TW_ERR_INVALID);
        assert_int_equal(tw_config_decode(doc, NULL, &b, &eb), TW_ERR_INVALID);
        assert_string_equal(ea.message, eb.message);
        json_decref(doc);
        free(text);
    }
    assert_non_null(strstr(eb.message, "nested deeper than 32 levels"));
}

static void test_defaults(void **state)
{
    (void)state;
    tw_config d, c;
    tw_error err;
    tw_config_defaults(&d);
    assert_string_equal(d.image_feature, "image_raw");
    assert_string_equal(d.label_feature, "label");
    assert_true(d.scale == 1.0f / 255.0f);
    assert_int_equal(d.shuffle_buffer, 10000);
    assert_int_equal(d.loss, TW_LOSS_SOFTMAX_XENT);
    assert_int_equal(d.optimizer, TW_OPT_SGD);
    assert_true(d.learning_rate == 0.001f && d.momentum == 0.9f);
    assert_true(d.beta1 == 0.9f && d.beta2 == 0.999f && d.epsilon == 1e-8f);
    assert_int_equal(d.lr_decay, 0);
    assert_true(d.l2 == 0.0f && d.ema_decay == 0.0f);
    assert_int_equal(d.batch_size, 32);
    assert_int_equal(d.towers, 1);
    assert_int_equal(d.steps, 1000);
    assert_int_equal(d.seed, 1);
    assert_int_equal(d.summary_every, 100);
    assert_int_equal(d.eval_every, 1000);
    assert_int_equal(d.checkpoint_every, 1000);
    assert_int_equal(d.keep_checkpoints, 5);
    assert_int_equal(d.cuda_graphs, 1);
    assert_int_equal(d.tf32, 0);
    assert_int_equal(d.winograd, 0);
    assert_string_equal(d.test_path, "");
    assert_int_equal(parse_text(TOP("'cuda_graphs':false,'tf32':true,'winograd':true"), NULL, &c, &err),
                     TW_OK);
    assert_int_equal(c.cuda_graphs, 0);
    assert_int_equal(c.tf32, 1);
    assert_int_equal(c.winograd, 1);

    assert_int_equal(parse_text(LAYERS("{'type':'conv2d','filters':8,'kernel':5},"
                                       "{'type':'max_pool2d','pool':[2,3]},"
                                       "{'type':'conv3d','filters':4,'kernel':[1,3,3]},"
                                       "{'type':'max_pool3d','pool':2,'strides':1},"
                                       "{'type':'dropout','rate':0.5},{'type':'flatten'}," DENSE10),
                                NULL, &c, &err),
                     TW_OK);
    assert_int_equal(c.n_layers, 7);
    const tw_layer_config *conv = &c.layers[0], *pool = &c.layers[1];
    assert_string_equal(conv->name, "layer1");
    assert_int_equal(conv->activation, TW_ACT_NONE);
    assert_int_equal(conv->same_padding, 1);
    assert_int_equal(conv->kernel[0], 1);
    assert_int_equal(conv->kernel[1], 5);
    assert_int_equal(conv->kernel[2], 5);
    assert_int_equal(conv->strides[0] + conv->strides[1] + conv->strides[2], 3);
    assert_int_equal(conv->weight_init.kind, TW_INIT_TRUNCATED_NORMAL);
    assert_true(conv->weight_init.stddev == 0.1f);
    assert_int_equal(conv->bias_init.kind, TW_INIT_ZEROS);
    assert_int_equal(pool->kernel[0], 1);
    assert_int_equal(pool->kernel[1], 2);
    assert_int_equal(pool->kernel[2], 3);
    assert_memory_equal(pool->strides, pool->kernel, sizeof pool->kernel); /* strides = pool */
    assert_int_equal(pool->same_padding, 1);
    assert_string_equal(pool->name, "max_pool2d_1");
    assert_string_equal(c.layers[2].name, "layer2");
    assert_int_equal(c.layers[2].kernel[0], 1);
    assert_int_equal(c.layers[2].kernel[2], 3);
    assert_int_equal(c.layers[3].kernel[0], 2);
    assert_int_equal(c.layers[3].strides[0], 1);
    assert_true(c.layers[4].rate == 0.5f);
    assert_string_equal(c.layers[6].name, "layer3");
    /* everything not given is the default */
    c.n_layers = d.n_layers = 0;
    memcpy(c.layers, d.layers, sizeof c.layers);
    c.rank = d.rank = 0;
    memset(c.shape, 0, sizeof c.shape);
    memset(c.train_path, 0, sizeof c.train_path);
    assert_memory_equal(&c, &d, sizeof c);
}

/* Parses text, writes it back, parses that: the same struct, and the writing is a fixed point. */
static void assert_round_trip(const char *single_quoted, const char *base_dir)
{
    tw_config a, b;
    tw_error err;
    assert_int_equal(parse_text(single_quoted, base_dir, &a, &err), TW_OK);
    char *json = tw_config_to_json(&a);
    assert_non_null(json);
    if (tw_config_parse(json, strlen(json), NULL, &b, &err) != TW_OK)
        print_error("%s\n%s\n", json, err.message);
    assert_int_equal(tw_config_parse(json, strlen(json), NULL, &b, &err), TW_OK);
    assert_memory_equal(&a, &b, sizeof a);
    char *again = tw_config_to_json(&b);
    assert_non_null(again);
    assert_string_equal(json, again);
    free(again);
    free(json);
}

static void test_round_trip(void **state)
{
    (void)state;
    assert_round_trip(CONTRACT, "/srv/data");
    assert_round_trip(CONTRACT, "rel/dir");
    assert_round_trip(
        "{'dataset':{'train':'/a/t','shape':[8,28,28,1],'scale':0.1,'image_feature':'img',"
        "'label_feature':'y','shuffle_buffer':7},"
        "'model':{'layers':[{'type':'conv3d','filters':3,'kernel':[1,3,3],'strides':2,"
        "'padding':'valid','activation':'tanh','name':'c/1',"
        "'weight_init':{'type':'glorot_uniform'},'bias_init':{'type':'constant','value':0.1}},"
        "{'type':'max_pool3d','pool':[1,2,2]},{'type':'dropout','rate':0.2},{'type':'flatten'},"
        "{'type':'dense','units':1,'activation':'sigmoid',"
        "'weight_init':{'type':'truncated_normal','stddev':0.02}}]},"
        "'loss':'mean_squared_error','optimizer':{'type':'adam','learning_rate':0.0003,"
        "'beta1':0.8,'beta2':0.95,'epsilon':1e-7},'l2':3.3e-5,'ema_decay':0.999,"
        "'lr_decay':{'type':'exponential','decay_steps':100,'decay_rate':0.5,'staircase':true},"
        "'batch_size':3,'towers':8,'steps':123456789,'seed':9223372036854775807,"
        "'summary_every':7,'eval_every':11,'checkpoint_every':13,'keep_checkpoints':1000,"
        "'input_memory_bytes':67108864,'cuda_graphs':false,'tf32':true,'winograd':true}",
        NULL);
    assert_round_trip(OPT("'type':'momentum','momentum':0.5,'learning_rate':0.3"), NULL);
    assert_round_trip(OPT("'type':'momentum','nesterov':true,'weight_decay':0.01,'global_clipnorm':1.5"), NULL);
    assert_round_trip(TOP("'label_smoothing':0.1"), NULL);
    assert_round_trip(TOP("'lr_decay':null"), NULL);
    assert_round_trip(DECAY("'type':'cosine','decay_steps':1000,'alpha':0.01,'warmup_steps':50"), NULL);
    assert_round_trip(DECAY("'type':'piecewise','boundaries':[300,600],'factors':[1,0.1,0.01],'warmup_steps':5"),
                      NULL);
    assert_round_trip(DECAY("'type':'piecewise','boundaries':[],'factors':[0.5]"), NULL);
    assert_round_trip("{'dataset':{'train':'t','shape':[4,4,3],'normalize':{'mean':[0.5,0.4,0.3],'std':[0.2]},"
                      "'augment':{'crop_padding':2,'horizontal_flip':true,'erasing_probability':0.25}},"
                      "'model':{'layers':[{'type':'flatten'}," DENSE10 "]}}", NULL);
    assert_round_trip(LAYERS("{'type':'conv2d','filters':2,'kernel':3,'name':'c'},{'type':'batch_norm','name':'bn',"
                             "'momentum':0.9,'epsilon':0.01,'activation':'relu'},{'type':'add','inputs':['bn','c']},"
                             "{'type':'concat','inputs':['add_2','input']},{'type':'avg_pool2d','pool':2},"
                             "{'type':'global_avg_pool'}," DENSE10), NULL);
    assert_round_trip(TOP("'init_from':{'checkpoint':'/runs/a/ckpt.safetensors','weights':'ema'}"), NULL);
    assert_round_trip(TOP("'init_from':null"), NULL);

    tw_config c;
    tw_error err;
    assert_int_equal(parse_text(TOP("'steps':5"), NULL, &c, &err), TW_OK);
    char *json = tw_config_to_json(&c);
    assert_non_null(json);
    const char *expected =
        "{\"batch_size\":32,\"checkpoint_every\":1000,\"cuda_graphs\":true,\"dataset\":"
        "{\"augment\":{\"crop_padding\":0,\"erasing_max_area\":0.33,\"erasing_probability\":0.0,"
        "\"horizontal_flip\":false,\"resized_crop_max_ratio\":1.3333334,\"resized_crop_min_scale\":0.0},"
        "\"image_feature\":\"image_raw\","
        "\"label_feature\":\"label\",\"normalize\":null,\"scale\":0.003921569,\"shape\":[784],\"shuffle_buffer\":"
        "10000,\"test\":null,\"train\":\"t\"},\"ema_decay\":0.0,\"eval_every\":1000,\"histogram_every\":1000,\"init_from\":null,"
        "\"input_memory_bytes\":0,\"keep_checkpoints\":5,\"l2\":0.0,\"label_smoothing\":0.0,\"loss\":\"softmax_cross_entropy\",\"lr_decay\":null,"
        "\"model\":{\"layers\":[{\"activation\":\"linear\",\"bias_init\":{\"type\":\"zeros\"},"
        "\"name\":\"layer1\",\"type\":\"dense\",\"units\":10,\"weight_init\":{\"stddev\":0.1,"
        "\"type\":\"truncated_normal\"}}]},\"optimizer\":{\"global_clipnorm\":0.0,\"learning_rate\":0.001,"
        "\"type\":\"sgd\",\"weight_decay\":0.0},"
        "\"seed\":1,\"steps\":5,\"summary_every\":100,\"tf32\":false,\"towers\":1,\"winograd\":false}";
    assert_string_equal(json, expected);
    free(json);
}

/* "init_from": a checkpoint path (a path key: the server refuses it) and which weights, both required. */
static void test_init_from(void **state)
{
    (void)state;
    tw_config c;
    tw_error err;
    assert_int_equal(parse_text(TOP("'init_from':{'checkpoint':'p.safetensors','weights':'raw'}"), "/base", &c, &err),
                     TW_OK);
    assert_int_equal(c.init_weights, TW_INIT_FROM_RAW);
    assert_string_equal(c.init_checkpoint, "/base/p.safetensors");
    assert_int_equal(parse_text(TOP("'steps':5"), NULL, &c, &err), TW_OK);
    assert_int_equal(c.init_weights, TW_INIT_FROM_NONE);
    char *text = json_of(TOP("'init_from':{'checkpoint':'x','weights':'best'}"));
    assert_true(refused_as(text, strlen(text), "init_from.weights", NULL));
    free(text);
    text = json_of(TOP("'init_from':{'weights':'ema'}"));
    assert_true(refused_as(text, strlen(text), "init_from.checkpoint", NULL));
    free(text);
    text = json_of(TOP("'init_from':{'checkpoint':'x','weights':'ema','run':'r1'}"));
    assert_true(refused_as(text, strlen(text), "init_from.run", NULL));
    json_t *doc = json_loads(text, 0, NULL);
    char key[64];
    json_object_del(json_object_get(doc, "dataset"), "train");
    assert_int_equal(tw_config_find_path_key(doc, key, sizeof key), 1);
    assert_string_equal(key, "init_from.checkpoint");
    json_decref(doc);
    free(text);
}

static void test_relative_paths(void **state)
{
    (void)state;
    tw_config c;
    tw_error err;
    const char *text = "{'dataset':{'train':'a/train.tfrecord','test':'/abs/test.tfrecord',"
                       "'shape':[1]},'model':{'layers':[" DENSE10 "]}}";
    assert_int_equal(parse_text(text, "/srv/x", &c, &err), TW_OK);
    assert_string_equal(c.train_path, "/srv/x/a/train.tfrecord");
    assert_string_equal(c.test_path, "/abs/test.tfrecord");
    assert_int_equal(parse_text(text, "/srv/x/", &c, &err), TW_OK);
    assert_string_equal(c.train_path, "/srv/x/a/train.tfrecord");
    assert_int_equal(parse_text(text, "/", &c, &err), TW_OK);
    assert_string_equal(c.train_path, "/a/train.tfrecord");
    assert_int_equal(parse_text(text, "", &c, &err), TW_OK);
    assert_string_equal(c.train_path, "a/train.tfrecord");
    assert_int_equal(parse_text(text, NULL, &c, &err), TW_OK);
    assert_string_equal(c.train_path, "a/train.tfrecord");
    assert_int_equal(parse_text(text, "../up", &c, &err), TW_OK);
    assert_string_equal(c.train_path, "../up/a/train.tfrecord");
}

/* A fresh folder under $TW_TEST_TMP (or /tmp) for files of this test. */
static void temp_dir(char *dir, size_t size)
{
    assert_int_equal(tw_test_mkdtemp(dir, size, "config"), 0);
}

static void write_file(const char *path, const char *text, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

static void test_load(void **state)
{
    (void)state;
    char dir[512], path[600], msg[1200];
    temp_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run.json", dir);
    char *text = json_of("{'dataset':{'train':'d/train.tfrecord','shape':[1]},"
                         "'model':{'layers':[" DENSE10 "]}}");
    write_file(path, text, strlen(text));
    free(text);
    tw_config c;
    tw_error err;
    assert_int_equal(tw_config_load(path, &c, &err), TW_OK);
    char expected[700];
    snprintf(expected, sizeof expected, "%s/d/train.tfrecord", dir);
    assert_string_equal(c.train_path, expected);

    text = json_of(TOP("'towers':0"));
    write_file(path, text, strlen(text));
    free(text);
    assert_int_equal(tw_config_load(path, &c, &err), TW_ERR_INVALID);
    assert_string_equal(err.file, path);
    tw_error_format(&err, msg, sizeof msg);
    snprintf(expected, sizeof expected, "%s: towers: must be in [1, 64], got 0", path);
    assert_string_equal(msg, expected);
    unlink(path);

    snprintf(path, sizeof path, "%s/missing.json", dir);
    assert_int_equal(tw_config_load(path, &c, &err), TW_ERR_IO);
    assert_string_equal(err.file, path);
    rmdir(dir);
}

/* Exactly 1 MiB loads (a config padded with spaces); one byte more is TW_ERR_TOO_LARGE. */
static void test_size_cap(void **state)
{
    (void)state;
    const size_t cap = 1 << 20;
    char dir[512], path[600];
    temp_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/big.json", dir);
    char *text = malloc(cap + 2);
    assert_non_null(text);
    char *json = json_of(BASE "}");
    size_t n = strlen(json);
    memset(text, ' ', cap + 1);
    memcpy(text, json, n);
    free(json);
    tw_config c;
    tw_error err;
    write_file(path, text, cap);
    assert_int_equal(tw_config_load(path, &c, &err), TW_OK);
    write_file(path, text, cap + 1);
    assert_int_equal(tw_config_load(path, &c, &err), TW_ERR_TOO_LARGE);
    assert_string_equal(err.file, path);
    assert_int_equal(tw_config_parse(text, cap, NULL, &c, &err), TW_OK);
    assert_int_equal(tw_config_parse(text, cap + 1, NULL, &c, &err), TW_ERR_TOO_LARGE);
    free(text);
    unlink(path);
    rmdir(dir);
}

static void test_override_towers(void **state)
{
    (void)state;
    tw_config c, before;
    tw_error err;
    assert_int_equal(parse_text(CONTRACT, "/d", &c, &err), TW_OK);
    assert_int_equal(tw_config_override_towers(&c, 0, &err), TW_OK);
    assert_int_equal(c.towers, 1);
    assert_int_equal(tw_config_override_towers(&c, 4, &err), TW_OK);
    assert_int_equal(c.towers, 4);
    assert_string_equal(c.train_path, "/d/train.tfrecord");
    memcpy(&before, &c, sizeof c);
    assert_int_equal(tw_config_override_towers(&c, 65, &err), TW_ERR_INVALID);
    assert_string_equal(err.message, "towers: must be in [1, 64], got 65");
    assert_int_equal(tw_config_override_towers(&c, -2, &err), TW_ERR_INVALID);
    assert_memory_equal(&c, &before, sizeof c);
}

/* The repository root, from this file's path (tests/unit/test_config.c). */
static void repo_root(char *out, size_t size)
{
    const char *me = __FILE__, *tail = "tests/unit/test_config.c";
    size_t n = strlen(me), t = strlen(tail);
    assert_true(n >= t && strcmp(me + n - t, tail) == 0);
    snprintf(out, size, "%.*s", (int)(n - t), me);
    if (!out[0])
        snprintf(out, size, ".");
}

static void test_examples_parse(void **state)
{
    (void)state;
    char dir[1024], path[2048];
    repo_root(dir, sizeof dir - 10);
    strcat(dir, "/examples");
    DIR *d = opendir(dir);
    assert_non_null(d);
    int seen = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".json") != 0)
            continue;
        tw_config c;
        tw_error err;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (tw_config_load(path, &c, &err) != TW_OK)
            print_error("%s: %s\n", path, err.message);
        assert_int_equal(tw_config_load(path, &c, &err), TW_OK);
        if (strstr(e->d_name, "cnn3d")) { /* the seed's volumes: bench_train.py makes them, no test set */
            assert_non_null(strstr(c.train_path, "/../tower-data/datasets/seed-cnn3d/train"));
            assert_string_equal(c.test_path, "");
            seen++;
            continue;
        }
        assert_non_null(strstr(c.train_path, "/../tower-data/datasets/fashion-mnist/train"));
        assert_non_null(strstr(c.test_path, "/../tower-data/datasets/fashion-mnist/test"));
        seen++;
    }
    closedir(d);
    assert_true(seen >= 3);
}

/* examples/seed_mlp.json is the seed program (the TensorFlow 1 multi-GPU MNIST MLP) as a config. */
static void test_seed_example(void **state)
{
    (void)state;
    char root[1024], path[1100];
    repo_root(root, sizeof root);
    snprintf(path, sizeof path, "%s/examples/seed_mlp.json", root);
    tw_config c;
    tw_error err;
    assert_int_equal(tw_config_load(path, &c, &err), TW_OK);
    assert_int_equal(c.n_layers, 3);
    assert_int_equal(c.layers[0].type, TW_LAYER_FLATTEN);
    assert_dense(&c.layers[1], 500, TW_ACT_RELU, "layer1");
    assert_dense(&c.layers[2], 10, TW_ACT_NONE, "layer2");
    assert_int_equal(c.layers[1].bias_init.kind, TW_INIT_GLOROT_UNIFORM);
    assert_int_equal(c.layers[2].bias_init.kind, TW_INIT_GLOROT_UNIFORM);
    assert_int_equal(c.optimizer, TW_OPT_SGD);
    assert_true(c.learning_rate == 0.001f);
    assert_int_equal(c.lr_decay, 1);
    assert_int_equal(c.decay_steps, 55000 / 32);
    assert_true(c.decay_rate == 0.99f);
    assert_int_equal(c.staircase, 0);
    assert_true(c.l2 == 1e-4f && c.ema_decay == 0.99f);
    assert_int_equal(c.batch_size, 32);
    assert_int_equal(c.towers, 1);
    assert_int_equal(c.steps, 30000);
    assert_int_equal(c.shuffle_buffer, 10000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contract_example), cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_bad_configs),      cmocka_unit_test(test_good_edges),
        cmocka_unit_test(test_exact_messages),   cmocka_unit_test(test_too_many_layers),
        cmocka_unit_test(test_deep_nesting),     cmocka_unit_test(test_path_length),
        cmocka_unit_test(test_round_trip),       cmocka_unit_test(test_relative_paths),
        cmocka_unit_test(test_load),             cmocka_unit_test(test_size_cap),
        cmocka_unit_test(test_override_towers),  cmocka_unit_test(test_examples_parse),
        cmocka_unit_test(test_seed_example),     cmocka_unit_test(test_decode_document),
        cmocka_unit_test(test_init_from),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
