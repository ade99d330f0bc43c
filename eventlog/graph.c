/* graph.c — GraphDef builder over protobuf-c structs. See graph.h.
 *
 * Every NodeDef and everything under it (strings, input arrays, attribute entries, shapes) lives in
 * a per-graph arena: a list of malloc'd blocks freed together by tw_graph_destroy. That keeps the
 * builder free of per-field ownership rules; protobuf-c only reads the structs when packing. */
#include "graph.h"

#include <stdlib.h>
#include <string.h>

#include "graph.pb-c.h"

typedef struct block {
    struct block *next;
    max_align_t data[];
} block;

struct tw_graph {
    block *blocks;          /* arena, owned */
    Twpb__NodeDef **nodes;  /* [cap] pointers into the arena, owned array */
    size_t n, cap;
};

/* Zeroed arena memory, or NULL when out of memory. */
static void *arena_alloc(tw_graph *g, size_t size)
{
    block *b = calloc(1, sizeof *b + size);
    if (!b)
        return NULL;
    b->next = g->blocks;
    g->blocks = b;
    return b->data;
}

static char *arena_strdup(tw_graph *g, const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = arena_alloc(g, n);
    return d ? memcpy(d, s, n) : NULL;
}

tw_status tw_graph_create(tw_graph **out, tw_error *err)
{
    *out = calloc(1, sizeof **out);
    return *out ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
}

void tw_graph_destroy(tw_graph *g)
{
    if (!g)
        return;
    for (block *b = g->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(g->nodes);
    free(g);
}

size_t tw_graph_nodes(const tw_graph *g) { return g->n; }

/* ---- validation, before any allocation: a refused node leaves the graph unchanged ---- */

static int empty(const char *s) { return !s || !s[0]; }

static size_t total_dims(const tw_graph_attr *a)
{
    size_t n = 0;
    for (size_t j = 0; j < a->n; j++)
        n += a->ranks[j];
    return n;
}

static tw_status check_attr(const tw_graph_attr *a, const char *node, tw_error *err)
{
    if (empty(a->key))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "node '%s': attribute without a key",
                            node);
    int ok = 0;
    switch (a->kind) {
    case TW_GRAPH_ATTR_STRING: ok = a->s != NULL; break;
    case TW_GRAPH_ATTR_INT:
    case TW_GRAPH_ATTR_BOOL:
    case TW_GRAPH_ATTR_TYPE: ok = 1; break;
    case TW_GRAPH_ATTR_SHAPE: ok = a->n == 0 || a->dims; break;
    case TW_GRAPH_ATTR_SHAPES: ok = a->n == 0 || (a->ranks && (a->dims || !total_dims(a))); break;
    }
    if (!ok)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "node '%s': attribute '%s' has an unknown kind or a missing value",
                            node, a->key);
    return TW_OK;
}

static tw_status check_node(const tw_graph *g, const char *name, const char *op,
                            const char *const *inputs, size_t n_inputs, const tw_graph_attr *attrs,
                            size_t n_attrs, tw_error *err)
{
    if (empty(name) || empty(op))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "a node needs a name and an op");
    for (size_t i = 0; i < g->n; i++)
        if (!strcmp(g->nodes[i]->name, name))
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "node '%s' already exists", name);
    for (size_t i = 0; i < n_inputs; i++)
        if (empty(inputs[i]))
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "node '%s': input %zu is empty",
                                name, i);
    for (size_t i = 0; i < n_attrs; i++) {
        TW_TRY(check_attr(&attrs[i], name, err));
        for (size_t j = 0; j < i; j++)
            if (!strcmp(attrs[j].key, attrs[i].key))
                return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                    "node '%s': attribute '%s' given twice", name, attrs[i].key);
    }
    return TW_OK;
}

/* ---- building (every helper returns NULL when out of memory) ---- */

static Twpb__TensorShapeProto *build_shape(tw_graph *g, const int64_t *dims, size_t rank)
{
    Twpb__TensorShapeProto *s = arena_alloc(g, sizeof *s);
    Twpb__TensorShapeProto__Dim *d = arena_alloc(g, rank * sizeof *d);
    Twpb__TensorShapeProto__Dim **dp = arena_alloc(g, rank * sizeof *dp);
    if (!s || !d || !dp)
        return NULL;
    twpb__tensor_shape_proto__init(s);
    for (size_t i = 0; i < rank; i++) {
        twpb__tensor_shape_proto__dim__init(&d[i]);
        d[i].size = dims[i];
        dp[i] = &d[i];
    }
    s->n_dim = rank;
    s->dim = dp;
    return s;
}

static Twpb__AttrValue__ListValue *build_shape_list(tw_graph *g, const tw_graph_attr *a)
{
    Twpb__AttrValue__ListValue *l = arena_alloc(g, sizeof *l);
    Twpb__TensorShapeProto **shapes = arena_alloc(g, a->n * sizeof *shapes);
    if (!l || !shapes)
        return NULL;
    twpb__attr_value__list_value__init(l);
    const int64_t *dims = a->dims;
    for (size_t j = 0; j < a->n; j++) {
        if (!(shapes[j] = build_shape(g, dims, a->ranks[j])))
            return NULL;
        dims += a->ranks[j];
    }
    l->n_shape = a->n;
    l->shape = shapes;
    return l;
}

/* Fills v from a; returns 0 when out of memory. */
static int build_value(tw_graph *g, const tw_graph_attr *a, Twpb__AttrValue *v)
{
    twpb__attr_value__init(v);
    switch (a->kind) {
    case TW_GRAPH_ATTR_STRING:
        v->value_case = TWPB__ATTR_VALUE__VALUE_S;
        v->s.len = strlen(a->s);
        return (v->s.data = (uint8_t *)arena_strdup(g, a->s)) != NULL;
    case TW_GRAPH_ATTR_INT:
        v->value_case = TWPB__ATTR_VALUE__VALUE_I;
        v->i = a->i;
        return 1;
    case TW_GRAPH_ATTR_BOOL:
        v->value_case = TWPB__ATTR_VALUE__VALUE_B;
        v->b = a->i != 0;
        return 1;
    case TW_GRAPH_ATTR_TYPE:
        v->value_case = TWPB__ATTR_VALUE__VALUE_TYPE;
        v->type = (Twpb__DataType)a->i;
        return 1;
    case TW_GRAPH_ATTR_SHAPE:
        v->value_case = TWPB__ATTR_VALUE__VALUE_SHAPE;
        return (v->shape = build_shape(g, a->dims, a->n)) != NULL;
    case TW_GRAPH_ATTR_SHAPES:
        v->value_case = TWPB__ATTR_VALUE__VALUE_LIST;
        return (v->list = build_shape_list(g, a)) != NULL;
    }
    return 0;
}

static int build_attrs(tw_graph *g, Twpb__NodeDef *node, const tw_graph_attr *attrs, size_t n)
{
    Twpb__NodeDef__AttrEntry *e = arena_alloc(g, n * sizeof *e);
    Twpb__NodeDef__AttrEntry **ep = arena_alloc(g, n * sizeof *ep);
    Twpb__AttrValue *v = arena_alloc(g, n * sizeof *v);
    if (!e || !ep || !v)
        return 0;
    for (size_t i = 0; i < n; i++) {
        twpb__node_def__attr_entry__init(&e[i]);
        if (!(e[i].key = arena_strdup(g, attrs[i].key)) || !build_value(g, &attrs[i], &v[i]))
            return 0;
        e[i].value = &v[i];
        ep[i] = &e[i];
    }
    node->n_attr = n;
    node->attr = ep;
    return 1;
}

static Twpb__NodeDef *build_node(tw_graph *g, const char *name, const char *op,
                                 const char *const *inputs, size_t n_inputs,
                                 const tw_graph_attr *attrs, size_t n_attrs)
{
    Twpb__NodeDef *node = arena_alloc(g, sizeof *node);
    char **in = arena_alloc(g, n_inputs * sizeof *in);
    if (!node || !in)
        return NULL;
    twpb__node_def__init(node);
    if (!(node->name = arena_strdup(g, name)) || !(node->op = arena_strdup(g, op)))
        return NULL;
    for (size_t i = 0; i < n_inputs; i++)
        if (!(in[i] = arena_strdup(g, inputs[i])))
            return NULL;
    node->n_input = n_inputs;
    node->input = in;
    return build_attrs(g, node, attrs, n_attrs) ? node : NULL;
}

tw_status tw_graph_add_node(tw_graph *g, const char *name, const char *op,
                            const char *const *inputs, size_t n_inputs, const tw_graph_attr *attrs,
                            size_t n_attrs, tw_error *err)
{
    TW_TRY(check_node(g, name, op, inputs, n_inputs, attrs, n_attrs, err));
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 16;
        Twpb__NodeDef **nodes = realloc(g->nodes, cap * sizeof *nodes);
        if (!nodes)
            return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
        g->nodes = nodes;
        g->cap = cap;
    }
    Twpb__NodeDef *node = build_node(g, name, op, inputs, n_inputs, attrs, n_attrs);
    if (!node)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory building node '%s'", name);
    g->nodes[g->n++] = node;
    return TW_OK;
}

tw_status tw_graph_serialize(const tw_graph *g, uint8_t **bytes, size_t *len, tw_error *err)
{
    Twpb__VersionDef versions = TWPB__VERSION_DEF__INIT;
    Twpb__GraphDef def = TWPB__GRAPH_DEF__INIT;
    versions.producer = TW_GRAPH_PRODUCER;
    def.n_node = g->n;
    def.node = g->nodes;
    def.versions = &versions;
    size_t n = twpb__graph_def__get_packed_size(&def);
    *bytes = malloc(n ? n : 1);
    if (!*bytes)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory serializing a graph");
    *len = twpb__graph_def__pack(&def, *bytes);
    return TW_OK;
}
