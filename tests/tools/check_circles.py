#!/usr/bin/env python3
"""No two source files of Tower use each other, directly or around a circle.

An arrow A -> B means: a function or global defined in B (a .c or .cu of any library or program the build
makes: base/, eventlog/, world/, kernels/cpu/, engine/, the CUDA module of kernels/cuda/ when it is
built, client/, server/, and the `tower` binary's cli/) is named in A. The arrows come from the compiler, not from reading text: `nm` lists, for every
object file of the build, the global symbols it defines and the ones it leaves undefined, so an inline
function in a header or a static one is not an arrow, and a call through a function pointer from a table is
(the table names the function). Generated protobuf-c code is left out (it is a library's output).

    check_circles.py BUILD_DIR [--forbid FROM=TO ...]
                                      prints every circle (a strongly connected set of files, with one
                                      cycle through it), and every arrow from a file whose name starts
                                      with FROM to one whose name starts with TO; exit 1 when there is
                                      any, 0 when there is none

Written here because no packaged tool reads object files this way (cscope and ctags read text and cannot
tell a call from a comment or a macro's expansion)."""
import os
import pathlib
import re
import subprocess
import sys

LIBRARIES = ("tw_base", "tw_eventlog", "tw_world", "tw_cpu", "tw_engine", "tower-cuda", "tw_client", "tw_server",
             "tower")


def objects(build):
    """{source name: object path} for the project's own objects, named by their folder under the build
    (e.g. 'server/api_runs.c', 'kernels/cpu/cpu_gemm.c')."""
    out = {}
    for lib in LIBRARIES:
        for obj in pathlib.Path(build).glob(f"**/CMakeFiles/{lib}.dir/**/*.o"):
            rel = obj.relative_to(obj.parents[[p.name for p in obj.parents].index(f"{lib}.dir")])
            source = str(rel)[: -len(".o")]
            if source.startswith("pb/") or "/pb/" in source:
                continue
            folder = obj.parents[[p.name for p in obj.parents].index("CMakeFiles")].parent
            out[f"{folder.relative_to(build).as_posix()}/{source}"] = obj
    return out


def symbols(obj):
    """(defined, undefined) global symbols of one object file."""
    text = subprocess.run(["nm", "--defined-only", "-g", str(obj)], capture_output=True, text=True,
                          check=True).stdout
    defined = {line.split()[-1] for line in text.splitlines() if re.match(r"^\S+ [A-Z] ", line)}
    text = subprocess.run(["nm", "--undefined-only", "-g", str(obj)], capture_output=True, text=True,
                          check=True).stdout
    undefined = {line.split()[-1] for line in text.splitlines() if line.strip()}
    return defined, undefined


def arrows(build):
    """{file: {file it uses: [a symbol that shows it]}}"""
    objs = objects(build)
    table = {name: symbols(obj) for name, obj in objs.items()}
    owner = {}
    for name, (defined, _) in table.items():
        for sym in defined:
            owner.setdefault(sym, name)
    graph = {name: {} for name in table}
    for name, (_, undefined) in table.items():
        for sym in sorted(undefined):
            other = owner.get(sym)
            if other and other != name:
                graph[name].setdefault(other, sym)
    return graph


def circles(graph):
    """Strongly connected sets of more than one file (Tarjan), each with one cycle through it."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [(group, cycle(graph, group)) for group in out]


def cycle(graph, group):
    """One cycle inside group, as a list of (file, symbol) steps back to the start."""
    start, members = group[0], set(group)
    path, seen = [start], {start}

    def walk(v):
        for w in sorted(graph[v]):
            if w == start and len(path) > 1:
                return True
            if w in members and w not in seen:
                seen.add(w)
                path.append(w)
                if walk(w):
                    return True
                path.pop()
        return False
    walk(start)
    return [(a, graph[a][b]) for a, b in zip(path, path[1:] + [start])]


def forbidden(graph, rules):
    """[(file, file it uses, symbol)] of the arrows that rules ([(from prefix, to prefix)]) forbid."""
    return [(a, b, sym) for a, uses in sorted(graph.items()) for b, sym in sorted(uses.items())
            for src, dst in rules if a.startswith(src) and b.startswith(dst)]


def main(argv):
    rules = [tuple(r.split("=", 1)) for r in argv[3::2] if "=" in r]
    if len(argv) < 2 or not os.path.isdir(argv[1]) or argv[2::2] != ["--forbid"] * len(rules) or \
            len(argv) != 2 + 2 * len(rules):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    graph = arrows(argv[1])
    if not graph:
        print(f"check_circles: no object files of {', '.join(LIBRARIES)} under {argv[1]}", file=sys.stderr)
        return 2
    found = circles(graph)
    for group, steps in found:
        print(f"circle of {len(group)} files: {' '.join(group)}")
        for a, sym in steps:
            print(f"    {a} uses {sym}")
    bad = forbidden(graph, rules)
    for a, b, sym in bad:
        print(f"forbidden arrow: {a} uses {b} ({sym})")
    folders = {}
    for name in graph:
        folders[name.rsplit("/", 1)[0]] = folders.get(name.rsplit("/", 1)[0], 0) + 1
    print(f"check_circles: {len(graph)} files, {sum(len(v) for v in graph.values())} arrows, "
          f"{len(found)} circles; files by folder: {', '.join(f'{k} {v}' for k, v in sorted(folders.items()))}")
    return 1 if found or bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
