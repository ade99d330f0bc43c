/* graph.h — a small GraphDef builder for TensorBoard's Graphs tab.
 *
 * Owns: building a tensorflow GraphDef (docs/formats.md §5) node by node — name, op, inputs ("node",
 * "node:k", "^node"), and a few attribute kinds (string, int, bool, dtype, shape, shape list such
 * as `_output_shapes`) — and serializing it through the protobuf-c code generated from
 * proto/graph.proto, with versions.producer set. A '/' in a node name makes a namespace
 * ("layer1/weights") in the UI.
 * Does not own: carrying the bytes into an event file (tw_events_add_graph) or checking that the
 * graph means anything to TensorFlow (inputs may name nodes added later, as GraphDef allows).
 *
 * The builder copies every string and array it is given; nothing passed in is kept after a call.
 * Not thread-safe: one owner at a time. */
#ifndef TW_GRAPH_H
#define TW_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* The GraphDef producer version written (a TF 1.x-era value; the Graphs tab does not check it). */
enum { TW_GRAPH_PRODUCER = 27 };

/* DataType values of tensorflow/core/framework/types.proto, for TW_GRAPH_ATTR_TYPE. */
enum {
    TW_GRAPH_DT_FLOAT = 1,
    TW_GRAPH_DT_INT32 = 3,
    TW_GRAPH_DT_STRING = 7,
    TW_GRAPH_DT_INT64 = 9,
};

typedef enum {
    TW_GRAPH_ATTR_STRING = 1,  /* s */
    TW_GRAPH_ATTR_INT = 2,     /* i */
    TW_GRAPH_ATTR_BOOL = 3,    /* i (0 or 1) */
    TW_GRAPH_ATTR_TYPE = 4,    /* i: a DataType value (TW_GRAPH_DT_*) */
    TW_GRAPH_ATTR_SHAPE = 5,   /* one shape: dims[0..n); -1 = unknown size */
    TW_GRAPH_ATTR_SHAPES = 6,  /* n shapes: shape j has ranks[j] dims, all concatenated in dims */
} tw_graph_attr_kind;

/* One attribute of a node. All pointers are borrowed for the duration of tw_graph_add_node only. */
typedef struct {
    const char *key;
    tw_graph_attr_kind kind;
    const char *s;         /* STRING */
    int64_t i;             /* INT, BOOL, TYPE */
    const int64_t *dims;   /* SHAPE: [n]; SHAPES: [sum of ranks] */
    const size_t *ranks;   /* SHAPES: [n] */
    size_t n;              /* SHAPE: rank; SHAPES: number of shapes */
} tw_graph_attr;

static inline tw_graph_attr tw_graph_attr_string(const char *key, const char *s)
{
    return (tw_graph_attr){.key = key, .kind = TW_GRAPH_ATTR_STRING, .s = s};
}

static inline tw_graph_attr tw_graph_attr_type(const char *key, int dtype)
{
    return (tw_graph_attr){.key = key, .kind = TW_GRAPH_ATTR_TYPE, .i = dtype};
}

static inline tw_graph_attr tw_graph_attr_bool(const char *key, int b)
{
    return (tw_graph_attr){.key = key, .kind = TW_GRAPH_ATTR_BOOL, .i = b != 0};
}

static inline tw_graph_attr tw_graph_attr_shape(const char *key, const int64_t *dims, size_t rank)
{
    return (tw_graph_attr){.key = key, .kind = TW_GRAPH_ATTR_SHAPE, .dims = dims, .n = rank};
}

/* `_output_shapes` of a node with one output is tw_graph_attr_shapes("_output_shapes", dims, &rank,
 * 1). */
static inline tw_graph_attr tw_graph_attr_shapes(const char *key, const int64_t *dims,
                                                 const size_t *ranks, size_t n)
{
    return (tw_graph_attr){.key = key, .kind = TW_GRAPH_ATTR_SHAPES, .dims = dims, .ranks = ranks,
                           .n = n};
}

typedef struct tw_graph tw_graph;

/* Creates an empty graph. Caller owns *out (tw_graph_destroy). Errors: TW_ERR_NOMEM. */
tw_status tw_graph_create(tw_graph **out, tw_error *err);

/* Frees the graph and every copy it made (NULL-safe). */
void tw_graph_destroy(tw_graph *g);

/* Appends a node. name, op, inputs[n_inputs] and attrs[n_attrs] are copied (borrowed during the
 * call). Errors: TW_ERR_INVALID for an empty/NULL name, op, input or attribute key, a name already
 * in the graph, a key repeated within the node, or an unknown attribute kind; TW_ERR_NOMEM. On
 * error the graph is unchanged. */
tw_status tw_graph_add_node(tw_graph *g, const char *name, const char *op,
                            const char *const *inputs, size_t n_inputs, const tw_graph_attr *attrs,
                            size_t n_attrs, tw_error *err);

/* Number of nodes added so far. */
size_t tw_graph_nodes(const tw_graph *g);

/* Serializes the GraphDef (nodes in insertion order, versions.producer = TW_GRAPH_PRODUCER).
 * Caller owns *bytes and releases it with free(). Errors: TW_ERR_NOMEM. */
tw_status tw_graph_serialize(const tw_graph *g, uint8_t **bytes, size_t *len, tw_error *err);

#endif
