"""The structure rules of docs/architecture.md that a tool can check: no two source files use each other,
directly or around a circle, and no source file points outside the repository for its documentation."""
import pathlib
import re
import subprocess
import sys

from conftest import BUILD, ROOT

SOURCES = ("base", "eventlog", "world", "engine", "kernels", "client", "server", "cli", "static", "tests", "scripts", "docker",
           "cmake", "docs", "examples")


def test_no_circle_between_source_files():
    """An arrow is a function or global defined in one .c/.cu and named in another (from nm)."""
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "tools" / "check_circles.py"), str(BUILD)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    files = int(re.search(r"(\d+) files", r.stdout).group(1))
    assert files >= 40, r.stdout  # the build's objects were found, not an empty graph
    folders = dict((k, int(v)) for k, v in re.findall(r"([\w/]+) (\d+)", r.stdout.split("files by folder:")[1]))
    wanted = {"base", "eventlog", "world", "kernels/cpu", "engine", "client", "server", "cli"}
    if list((BUILD / "kernels" / "cuda").glob("CMakeFiles/tower-cuda.dir/*.o")):  # a build with the CUDA module
        wanted.add("kernels/cuda")
    assert wanted <= set(folders), r.stdout  # every library the build makes is in the graph


def test_check_circles_finds_a_circle(tmp_path):
    """The checker itself: two objects that call each other are a circle."""
    lib = tmp_path / "server" / "CMakeFiles" / "tw_server.dir"
    lib.mkdir(parents=True)
    (tmp_path / "a.c").write_text("int b(void); int a(void) { return b(); }\n")
    (tmp_path / "b.c").write_text("int a(void); int b(void) { return a() + 1; }\n")
    for name in ("a", "b"):
        subprocess.run(["cc", "-c", str(tmp_path / f"{name}.c"), "-o", str(lib / f"{name}.c.o")], check=True)
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "tools" / "check_circles.py"), str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "server/a.c" in r.stdout and "server/b.c" in r.stdout, r.stdout


def test_no_source_points_outside_the_repository():
    outside = re.compile(r"\.\./shared|shared/(DESIGN|FORMATS|RELIABILITY)|\b(DESIGN|FORMATS|RELIABILITY)\.md")
    hits = []
    for folder in SOURCES:
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in (".c", ".h", ".cu", ".py", ".md", ".sh", ".js", ".html",
                                                  ".cmake", ".txt", ".yaml", ".json", ""):
                try:
                    text = path.read_text()
                except UnicodeDecodeError:
                    continue
                hits += [f"{path.relative_to(ROOT)}:{i + 1}: {line.strip()}"
                         for i, line in enumerate(text.splitlines()) if outside.search(line)]
    for path in ROOT.glob("*.md"):
        hits += [f"{path.name}:{i + 1}" for i, line in enumerate(path.read_text().splitlines())
                 if outside.search(line)]
    assert hits == [], "\n".join(hits)


# server/ names nothing of a backend; world/ and the CPU backend stand on base/ alone (the CPU backend sees
# engine/backend.h's declarations, never an engine function).
BACKEND_RULES = [arg for rule in ("server/=kernels/", "world/=engine/", "world/=eventlog/", "world/=kernels/",
                                  "kernels/cpu/=engine/", "kernels/cpu/=eventlog/", "kernels/cpu/=world/")
                 for arg in ("--forbid", rule)]


def test_no_arrow_from_the_server_into_a_backend(tmp_path):
    """server/ reaches a backend only through the registry (engine/backend.h), never a backend's own files,
    and world/ and kernels/cpu/ use base/ alone; shown to fail on a planted server file that calls into a CPU
    backend file."""
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "tools" / "check_circles.py"), str(BUILD), *BACKEND_RULES],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "forbidden arrow" not in r.stdout, r.stdout
    objects = {"server/CMakeFiles/tw_server.dir/planted.c": "void tw_cpu_start(void); int main(void) { tw_cpu_start(); }\n",
               "kernels/cpu/CMakeFiles/tw_cpu.dir/cpu_start.c": "void tw_cpu_start(void) {}\n"}
    for rel, text in objects.items():
        src = tmp_path / f"{pathlib.Path(rel).name}"
        src.write_text(text)
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cc", "-c", str(src), "-o", str(tmp_path / f"{rel}.o")], check=True)
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "tools" / "check_circles.py"), str(tmp_path),
                        *BACKEND_RULES], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "forbidden arrow: server/planted.c uses kernels/cpu/cpu_start.c" in r.stdout, r.stdout


def untested_alone(modules, unit_dir):
    """The modules (paths of .c/.cu under the source folders) without tests/unit/test_<module>.c."""
    return sorted(m for m in modules if not (unit_dir / f"test_{pathlib.Path(m).stem}.c").exists())


def table_gaps(doc, modules, unit_dir, test_names):
    """(modules missing from the table of doc, tests the table names that do not exist)."""
    section = doc.split("## What tests each module", 1)[1]
    listed = set(re.findall(r"`((?:base|eventlog|world|engine|server|client|cli|kernels/cpu|kernels/cuda)/[\w.]+\.(?:c|cu))`",
                            section))
    named = set(re.findall(r"`(unit_\w+|test_\w+\.py)`", section))
    return [m for m in untested_alone(modules, unit_dir) if m not in listed], sorted(named - test_names)


def test_every_module_without_a_unit_test_is_in_the_coverage_table(tmp_path):
    modules = [str(p.relative_to(ROOT)) for folder in ("base", "eventlog", "world", "engine", "server", "client", "cli",
                                                            "kernels/cpu", "kernels/cuda")
               for ext in ("*.c", "*.cu") for p in (ROOT / folder).glob(ext)]
    tests = {f"unit_{p.stem[5:]}" for p in (ROOT / "tests" / "unit").glob("test_*.c")} | \
        {p.name for p in (ROOT / "tests" / "integration").glob("test_*.py")}
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert table_gaps(doc, modules, ROOT / "tests" / "unit", tests) == ([], [])
    planted = doc + "\n| `server/nothing.c` | `test_nothing.py` |\n"
    assert table_gaps(planted, modules + ["server/new_module.c"], ROOT / "tests" / "unit", tests) == \
        (["server/new_module.c"], ["test_nothing.py"])
