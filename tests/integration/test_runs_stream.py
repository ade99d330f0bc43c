"""GET /api/v1/runs is streamed row by row (server/api_runs_list.c over the store's page reads): at
2,000 runs with bulky configs (32 KB each, so that a page of 1,000 is 32 MB of JSON) the pages parse and
equal SQLite's own answer (newest first, total, limit, offset), the server's peak RSS does not grow with the
page, and runs deleted while a list streams leave it valid JSON. A real `tower serve` over a data folder
whose runs are copies of one finished run inserted into its SQLite file (the triggers keep the counts)."""
import json
import signal
import sqlite3

import pytest
import requests

from conftest import start_server
from helpers import copy_run_rows
from test_server import seed_config, submit, wait_dataset, wait_run

RUNS = 2000
PAD = 32_000  # bytes of each copy's config
CSV = "a,b,label\n" + "".join(f"{i},{i * 2},{i % 2}\n" for i in range(40))


@pytest.fixture(scope="module")
def data(tower_bin, tool, tmp_path_factory):
    """A data folder holding RUNS finished runs, the last RUNS - 1 with a config of PAD bytes more."""
    folder = tmp_path_factory.mktemp("list") / "data"
    server = start_server(tower_bin, folder, "--trainer", tool("tw_faketrain"), env={"TW_FAKE": "step_ms=1"})
    try:
        r = requests.post(server.api("/datasets?name=tab&label_column=label"), data=CSV,
                          headers={"Content-Type": "text/csv"}, timeout=30)
        assert wait_dataset(server, r.json()["id"])["status"] == "ready"
        first = submit(server, seed_config(dataset="tab", steps=5, checkpoint_every=0)).json()["id"]
        assert wait_run(server, first)["status"] == "succeeded"
    finally:
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=60) == 0
    con = sqlite3.connect(folder / "tower.db")
    (config,) = con.execute("SELECT config FROM runs WHERE id = ?", (first,)).fetchone()
    con.close()
    copy_run_rows(folder / "tower.db", first, RUNS - 1, config=json.dumps({**json.loads(config), "pad": "x" * PAD}))
    return folder


def expected(server, limit, offset, status=None):
    """(ids, total) of the page as SQLite answers it, newest first."""
    con = sqlite3.connect(f"file:{server.data / 'tower.db'}?mode=ro", uri=True)
    try:
        where = "WHERE status = ?" if status else ""
        args = (status,) if status else ()
        ids = [r[0] for r in con.execute(f"SELECT id FROM runs {where} ORDER BY seq DESC LIMIT ? OFFSET ?",
                                         (*args, limit, offset))]
        (total,) = con.execute(f"SELECT count(*) FROM runs {where}", args).fetchone()
        return ids, total
    finally:
        con.close()


def vm_hwm_kib(server):
    """The server's peak resident set so far (KiB)."""
    with open(f"/proc/{server.proc.pid}/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith("VmHWM:")))


def test_streamed_pages_equal_the_store(serve, data):
    server = serve(data=data)
    for limit, offset, status, fields in ((1000, 0, None, None), (1000, 1000, None, "id,status"),
                                          (1000, 1500, None, "id"), (7, 1995, None, "all"),
                                          (1000, 0, "succeeded", "id,name"), (50, 0, "queued", None)):
        params = {"limit": limit, "offset": offset, **({"status": status} if status else {}),
                  **({"fields": fields} if fields else {})}
        r = requests.get(server.api("/runs"), params=params, timeout=60)
        assert r.status_code == 200 and r.headers["Transfer-Encoding"] == "chunked", (params, r.headers)
        page = r.json()
        ids, total = expected(server, limit, offset, status)
        assert [run["id"] for run in page["runs"]] == ids, params
        assert (page["total"], page["limit"], page["offset"]) == (total, limit, offset), params
    assert expected(server, 1, 0, "queued")[1] == 0 and expected(server, 1, 0)[1] == RUNS
    listed = requests.get(server.api("/runs?limit=3"), timeout=60).json()["runs"]
    assert all("config" not in run and "class_names" not in run and "status" in run for run in listed)
    one = requests.get(server.api(f"/runs/{listed[0]['id']}"), timeout=60).json()
    assert len(one["config"]["pad"]) == PAD  # the run's own route has the config
    chosen = requests.get(server.api("/runs?limit=3&fields=config"), timeout=60).json()["runs"]
    assert [set(run) for run in chosen] == [{"id", "config"}] * 3 and chosen[0]["config"] == one["config"]


def test_peak_memory_does_not_grow_with_the_page(serve, data):
    """Whole pages of 1,000 runs with their configs (32 MB of JSON each): the server's peak RSS grows by
    less than a quarter of one page. Building a page in memory (its text and its jansson tree) would take
    more than the page itself."""
    server = serve(data=data)
    assert requests.get(server.api("/runs?limit=5&fields=all"), timeout=60).status_code == 200  # warm
    before = vm_hwm_kib(server)
    sizes = []
    for fields in ("all", None, "all", "id,config", "all"):
        r = requests.get(server.api("/runs"), params={"limit": 1000, **({"fields": fields} if fields else {})},
                         timeout=120)
        assert r.status_code == 200
        sizes.append(len(r.content))
    assert len(json.loads(r.content)["runs"]) == 1000
    page_kib = max(sizes) // 1024
    assert page_kib > PAD  # a page is bigger than PAD * 1000 bytes
    grown = vm_hwm_kib(server) - before
    assert grown < page_kib // 4, f"peak RSS grew by {grown} KiB over pages of {page_kib} KiB"


def test_runs_deleted_while_a_list_streams(serve, data):
    """The list is opened and its first bytes read; then the oldest 400 runs of its page (at least 19 MB
    of JSON behind what the server can have sent into the socket buffers) are deleted; the rest of the body
    is still one JSON document: the total as at the start, the deleted runs left out, the others in order."""
    server = serve(data=data)
    ids, total = expected(server, 1000, 0)
    r = requests.get(server.api("/runs?limit=1000&fields=all"), stream=True, timeout=120)
    assert r.status_code == 200
    body = r.iter_content(64 * 1024)
    head = next(body)
    assert head.startswith(b'{"total":%d,' % total)
    gone = ids[600:]
    for rid in gone:
        d = requests.delete(server.api(f"/runs/{rid}"), timeout=60)
        assert d.status_code == 204, d.text
    page = json.loads(head + b"".join(body))
    assert page["total"] == total and page["limit"] == 1000
    assert [run["id"] for run in page["runs"]] == ids[:600]
    assert all(len(run["config"]["pad"]) == PAD for run in page["runs"])
    after = requests.get(server.api("/runs?limit=1000&fields=id"), timeout=60).json()
    assert after["total"] == total - len(gone) and [run["id"] for run in after["runs"]][:600] == ids[:600]
