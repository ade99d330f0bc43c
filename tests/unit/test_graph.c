/* test_graph.c — the GraphDef builder: a small MLP serialized and parsed back by protobuf-c with
 * every attribute kind intact, producer version set, and refused nodes (duplicates, empty names)
 * leaving the graph unchanged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "graph.h"
#include "graph.pb-c.h"

static Twpb__GraphDef *round_trip(const tw_graph *g)
{
    uint8_t *bytes;
    size_t len;
    tw_error err;
    assert_int_equal(tw_graph_serialize(g, &bytes, &len, &err), TW_OK);
    Twpb__GraphDef *def = twpb__graph_def__unpack(NULL, len, bytes);
    free(bytes);
    assert_non_null(def);
    return def;
}

/* Each test starts from an empty graph in *state; teardown destroys it. */
static int setup(void **state)
{
    tw_graph *g;
    tw_error err;
    assert_int_equal(tw_graph_create(&g, &err), TW_OK);
    *state = g;
    return 0;
}

static int teardown(void **state)
{
    tw_graph_destroy(*state);
    return 0;
}

static const Twpb__AttrValue *find_attr(const Twpb__NodeDef *n, const char *key)
{
    for (size_t i = 0; i < n->n_attr; i++)
        if (!strcmp(n->attr[i]->key, key))
            return n->attr[i]->value;
    fail_msg("node %s has no attribute %s", n->name, key);
    return NULL;
}

static void test_mlp_round_trip(void **state)
{
    tw_graph *g = *state;
    tw_error err;
    const int64_t x_dims[] = {-1, 784}, w_dims[] = {784, 500};
    const size_t x_rank = 2;
    const tw_graph_attr x_attrs[] = {
        tw_graph_attr_type("dtype", TW_GRAPH_DT_FLOAT),
        tw_graph_attr_shape("shape", x_dims, 2),
        tw_graph_attr_shapes("_output_shapes", x_dims, &x_rank, 1),
    };
    assert_int_equal(tw_graph_add_node(g, "input/x", "Placeholder", NULL, 0, x_attrs, 3, &err),
                     TW_OK);
    const tw_graph_attr w_attrs[] = {tw_graph_attr_shape("shape", w_dims, 2),
                                     tw_graph_attr_string("container", "tower")};
    assert_int_equal(
        tw_graph_add_node(g, "layer1/weights", "VariableV2", NULL, 0, w_attrs, 2, &err), TW_OK);
    const char *const mm_in[] = {"input/x", "layer1/weights:0", "^input/x"};
    const tw_graph_attr mm_attrs[] = {tw_graph_attr_bool("transpose_a", 0),
                                      tw_graph_attr_bool("transpose_b", 1),
                                      {.key = "n", .kind = TW_GRAPH_ATTR_INT, .i = -7}};
    assert_int_equal(tw_graph_add_node(g, "layer1/MatMul", "MatMul", mm_in, 3, mm_attrs, 3, &err),
                     TW_OK);
    assert_int_equal(tw_graph_nodes(g), 3);

    Twpb__GraphDef *def = round_trip(g);
    assert_non_null(def->versions);
    assert_int_equal(def->versions->producer, TW_GRAPH_PRODUCER);
    assert_int_equal(def->n_node, 3);
    const Twpb__NodeDef *x = def->node[0], *w = def->node[1], *mm = def->node[2];
    assert_string_equal(x->name, "input/x");
    assert_string_equal(x->op, "Placeholder");
    assert_int_equal(x->n_input, 0);
    assert_int_equal(find_attr(x, "dtype")->type, TWPB__DATA_TYPE__DT_FLOAT);
    const Twpb__TensorShapeProto *shape = find_attr(x, "shape")->shape;
    assert_int_equal(shape->n_dim, 2);
    assert_int_equal(shape->dim[0]->size, -1);
    assert_int_equal(shape->dim[1]->size, 784);
    const Twpb__AttrValue *outs = find_attr(x, "_output_shapes");
    assert_int_equal(outs->value_case, TWPB__ATTR_VALUE__VALUE_LIST);
    assert_int_equal(outs->list->n_shape, 1);
    assert_int_equal(outs->list->shape[0]->dim[1]->size, 784);
    const Twpb__AttrValue *container = find_attr(w, "container");
    assert_int_equal(container->s.len, 5);
    assert_memory_equal(container->s.data, "tower", 5);
    assert_string_equal(mm->input[1], "layer1/weights:0");
    assert_string_equal(mm->input[2], "^input/x");
    assert_int_equal(find_attr(mm, "transpose_a")->value_case, TWPB__ATTR_VALUE__VALUE_B);
    assert_false(find_attr(mm, "transpose_a")->b);
    assert_true(find_attr(mm, "transpose_b")->b);
    assert_int_equal(find_attr(mm, "n")->i, -7);
    twpb__graph_def__free_unpacked(def, NULL);
}

/* Two shapes in one list: ranks {2, 0} over dims {3, 4} -> [3,4] and a scalar. */
static void test_shape_list_of_several(void **state)
{
    tw_graph *g = *state;
    tw_error err;
    const int64_t dims[] = {3, 4};
    const size_t ranks[] = {2, 0};
    const tw_graph_attr a = tw_graph_attr_shapes("_output_shapes", dims, ranks, 2);
    assert_int_equal(tw_graph_add_node(g, "split", "Split", NULL, 0, &a, 1, &err), TW_OK);
    Twpb__GraphDef *def = round_trip(g);
    const Twpb__AttrValue__ListValue *l = find_attr(def->node[0], "_output_shapes")->list;
    assert_int_equal(l->n_shape, 2);
    assert_int_equal(l->shape[0]->n_dim, 2);
    assert_int_equal(l->shape[0]->dim[1]->size, 4);
    assert_int_equal(l->shape[1]->n_dim, 0);
    twpb__graph_def__free_unpacked(def, NULL);
}

static void test_refused_nodes_leave_graph_unchanged(void **state)
{
    tw_graph *g = *state;
    tw_error err;
    assert_int_equal(tw_graph_add_node(g, "a", "Const", NULL, 0, NULL, 0, &err), TW_OK);
    assert_int_equal(tw_graph_add_node(g, "a", "Const", NULL, 0, NULL, 0, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "already exists"));
    assert_int_equal(tw_graph_add_node(g, "b", "", NULL, 0, NULL, 0, &err), TW_ERR_INVALID);
    assert_int_equal(tw_graph_add_node(g, "", "Const", NULL, 0, NULL, 0, &err), TW_ERR_INVALID);
    const char *const bad_in[] = {"a", ""};
    assert_int_equal(tw_graph_add_node(g, "b", "Add", bad_in, 2, NULL, 0, &err), TW_ERR_INVALID);
    const tw_graph_attr twice[] = {tw_graph_attr_bool("k", 1), tw_graph_attr_bool("k", 0)};
    assert_int_equal(tw_graph_add_node(g, "b", "Add", NULL, 0, twice, 2, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "'k' given twice"));
    const tw_graph_attr no_string = {.key = "s", .kind = TW_GRAPH_ATTR_STRING};
    assert_int_equal(tw_graph_add_node(g, "b", "Add", NULL, 0, &no_string, 1, &err),
                     TW_ERR_INVALID);
    const tw_graph_attr bad_kind = {.key = "s", .kind = (tw_graph_attr_kind)99};
    assert_int_equal(tw_graph_add_node(g, "b", "Add", NULL, 0, &bad_kind, 1, &err),
                     TW_ERR_INVALID);
    assert_int_equal(tw_graph_nodes(g), 1);
    Twpb__GraphDef *def = round_trip(g);
    assert_int_equal(def->n_node, 1);
    twpb__graph_def__free_unpacked(def, NULL);
}

static void test_empty_graph(void **state)
{
    Twpb__GraphDef *def = round_trip(*state);
    assert_int_equal(def->n_node, 0);
    assert_int_equal(def->versions->producer, TW_GRAPH_PRODUCER);
    twpb__graph_def__free_unpacked(def, NULL);
    tw_graph_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_mlp_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shape_list_of_several, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_nodes_leave_graph_unchanged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_graph, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
