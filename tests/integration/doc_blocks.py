"""Runs the shell blocks of a Markdown document (README.md, server/API.md) as a person would type them.

A Markdown code block is a shell block when its fence says ```sh; each one runs, in order, as one bash
script (`set -euo pipefail`, so every command must exit 0) in a work folder the test makes, on free ports
instead of the document's (8080, 8081, 6006) and with the placeholder ids the test gives. curl runs with
`fail-with-body` (from a curlrc), so an HTTP error reply fails its command. A command ending in `&` is a
server started in the background: it must name its port, and the script waits until something answers
there before going on. A shell block that cannot run in the suite says so on the line right before it,
`<!-- not run by the tests: REASON -->`; every other shell block runs, so a document cannot quietly drift
from the code. A bare ``` block is a synopsis (usage lines starting with `tower `), never run.
"""
import dataclasses
import os
import re
import signal
import subprocess
import sys
import textwrap

from helpers import free_port

MARKER = re.compile(r"^<!-- not run by the tests: (.+\S) -->$")
FENCE = re.compile(r"^```(\S*)\s*$")
PORTS = ("8080", "8081", "6006")
BACKGROUND = re.compile(r"(?<![&|])&\s*(#.*)?$")


@dataclasses.dataclass
class Block:
    lang: str      # "sh", "" (a synopsis), "json", ...
    text: str
    line: int      # the 1-based line of its opening fence
    skip: str      # the marker's reason, or "" when it runs


def blocks(path):
    """The fenced blocks of the Markdown file path, with the marker (if any) right before each."""
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = MARKER.match(lines[i - 1]) if i else None
        assert marker or "not run by the tests" not in (lines[i - 1] if i else ""), \
            f"{path.name}:{i}: a malformed marker: {lines[i - 1]}"
        found.append(Block(m.group(1), "\n".join(lines[i + 1:end]), i + 1, marker.group(1) if marker else ""))
        i = end + 1
    return found


def check_kinds(path, found):
    """Every marker stands before a shell block, and every bare block is a synopsis."""
    for b in found:
        where = f"{path.name}:{b.line}"
        assert b.lang in ("sh", "", "json"), f"{where}: a ```{b.lang} block: use ```sh for commands"
        assert not b.skip or b.lang == "sh", f"{where}: a 'not run' marker before a ```{b.lang} block"
        if b.lang == "":
            for line in b.text.splitlines():
                assert not line.strip() or line.startswith(("tower ", " ")), \
                    f"{where}: a bare block holds '{line}': a synopsis starts each line with 'tower '; " \
                    "commands to run go in a ```sh block"


class Shell:
    """Runs blocks in `cwd` with the ports mapped to free ones; kills every background server at close()."""

    def __init__(self, cwd, ports=None, placeholders=None):
        self.cwd = cwd
        self.ports = ports or {p: str(free_port()) for p in PORTS}
        self.placeholders = placeholders or {}
        self.groups = []
        (cwd / ".curl").mkdir(exist_ok=True)
        (cwd / ".curl" / ".curlrc").write_text("fail-with-body\nsilent\nshow-error\n")
        venv_bin = os.path.dirname(sys.executable)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TOWER_")}
        self.env.update(CURL_HOME=str(cwd / ".curl"), PATH=f"{venv_bin}:{os.environ['PATH']}")

    def script(self, block):
        """The block as the bash script that runs it: ports and placeholders replaced, a wait after each
        background command."""
        text = re.sub(r"\b(" + "|".join(PORTS) + r")\b", lambda m: self.ports[m.group(1)], block.text)
        for name, value in self.placeholders.items():
            text = re.sub(rf"\b{name}\b", value, text)
        out = []
        for line in text.splitlines():
            out.append(line)
            if BACKGROUND.search(line):
                port = [p for p in self.ports.values() if re.search(rf"\b{p}\b", line)]
                assert port, f"line {block.line}: a background command must name the port it serves: {line}"
                out.append(f"tw_answers {port[0]}")
        prelude = textwrap.dedent("""\
            set -euo pipefail
            trap 'echo "failed (exit $?): $BASH_COMMAND" >&2' ERR
            tw_answers() {  # polls http://127.0.0.1:$1/ for at most 120 s
              local deadline=$((SECONDS + 120))
              until curl -o /dev/null "http://127.0.0.1:$1/" 2>/dev/null; do
                [ "$SECONDS" -lt "$deadline" ] || { echo "nothing answers on port $1" >&2; return 1; }
                sleep 0.2
              done
            }
            """)
        return prelude + "\n".join(out) + "\n"

    def run(self, block, name, timeout=300):
        """Runs the block; returns (exit status, its output). Its background commands keep running."""
        script = self.cwd / f".{name}.sh"
        script.write_text(self.script(block))
        log = self.cwd / f".{name}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(["bash", str(script)], cwd=self.cwd, env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            self.groups.append(proc.pid)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = None
        return rc, log.read_text()

    def close(self):
        for pgid in self.groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_document(path, shell, skip_lines=()):
    """Runs every unmarked shell block of path in order (those starting at a line in skip_lines are left
    out: for a test that must leave one out for now); fails on the first that does not succeed."""
    found = blocks(path)
    check_kinds(path, found)
    ran = 0
    for i, b in enumerate(found):
        if b.lang != "sh" or b.skip or b.line in skip_lines:
            continue
        rc, out = shell.run(b, f"block{i}")
        assert rc == 0, f"{path.name}:{b.line}: the block " + \
            ("did not end within its time" if rc is None else f"exited {rc}") + \
            f"\n--- the block ---\n{b.text}\n--- its output (last 4000 characters) ---\n{out[-4000:]}"
        ran += 1
    return ran
