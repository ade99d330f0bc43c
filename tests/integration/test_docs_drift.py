"""Docs that cannot drift from the code: every `tw_`/`TW_` identifier the README, server/API.md, BENCHMARKS.md and
docs/ name exists in the sources or the build files; every subcommand `tower --help` lists is in the README; no
file a user or contributor reads cites an issue number or a work session. Each check is shown to fail on a
planted stale name."""
import re
import subprocess

from conftest import ROOT

IDENTIFIER = re.compile(r"\b(?:tw|TW)_[A-Za-z0-9_]*[A-Za-z0-9]\b")
# The naming rule's own placeholders (docs/architecture.md: `tw_x_create`/`tw_x_destroy`, ...).
PLACEHOLDERS = re.compile(r"^tw_x_")
CODE_GLOBS = ("*.c", "*.h", "*.cu", "*.cuh", "CMakeLists.txt", "*.cmake", "*.sh", "*.py", "*.js")
PROSE = ["README.md", "BENCHMARKS.md", "server/API.md"]


def known_identifiers():
    names = set()
    for glob in CODE_GLOBS:
        for path in ROOT.rglob(glob):
            if any(part.startswith(("build", ".")) for part in path.relative_to(ROOT).parts) or path.name == \
                    "test_docs_drift.py":  # its planted names are not the code's
                continue
            names |= set(IDENTIFIER.findall(path.read_text(errors="ignore")))
    return names


def prose_files():
    return [ROOT / p for p in PROSE] + sorted((ROOT / "docs").rglob("*.md"))


def stale_names(texts, known):
    """[(where, name)] of the identifiers in texts ({where: text}) that the code does not have."""
    return [(where, name) for where, text in texts.items() for name in IDENTIFIER.findall(text)
            if name not in known and not PLACEHOLDERS.match(name)]


def test_every_identifier_the_docs_name_exists():
    known = known_identifiers()
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in prose_files()}
    assert stale_names(texts, known) == []
    planted = {"planted.md": "the list is built by `tw_store_frobnicate` and `tw_store_open`"}
    assert stale_names(planted, known) == [("planted.md", "tw_store_frobnicate")]


def subcommands(help_text):
    """The subcommands `tower --help` lists (its two-space indented first words)."""
    return re.findall(r"^  ([a-z]+)\s{2,}", help_text, re.M)


def missing_from_readme(commands, readme):
    return [c for c in commands if not re.search(rf"`tower {c}\b|\btower {c}\b", readme)]


def test_every_subcommand_is_in_the_readme(tower_bin):
    out = subprocess.run([str(tower_bin), "--help"], capture_output=True, text=True, timeout=30)
    commands = subcommands(out.stdout + out.stderr)
    assert len(commands) >= 15, out.stdout
    readme = (ROOT / "README.md").read_text()
    assert missing_from_readme(commands, readme) == []
    assert missing_from_readme(commands + ["frobnicate"], readme) == ["frobnicate"]


# An issue cited by number, or the work behind a change told as a story of sessions.
WORK_WORDS = re.compile(r"\b(?:issue|issues) #?\d+|\b(?:this|last|next|previous|first|second|third) session\b"
                        r"|\bsession \d+\b", re.I)
READ_GLOBS = ("*.md", "*.c", "*.h", "*.cu", "*.py", "*.sh", "*.js", "*.html", "*.css", "CMakeLists.txt", "*.cmake",
              "Dockerfile*")


def work_words(texts):
    return [(where, m.group(0)) for where, text in texts.items() for m in WORK_WORDS.finditer(text)]


def test_no_file_cites_an_issue_or_a_session():
    texts = {}
    for glob in READ_GLOBS:
        for path in ROOT.rglob(glob):
            rel = path.relative_to(ROOT)
            if any(part.startswith(("build", ".")) for part in rel.parts) or rel.name == "test_docs_drift.py":
                continue
            texts[str(rel)] = path.read_text(errors="ignore")
    assert work_words(texts) == []
    assert work_words({"planted.c": "/* fixed in issue 12, as the last session found */"}) == [
        ("planted.c", "issue 12"), ("planted.c", "last session")]
