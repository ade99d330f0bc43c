"""Issue 14: GET /api/v1/runs?fields=… chooses the fields each listed run shows (server/api_runs.c); without
it every field, config included, as before (the status page and `tower runs` read those). A real
`tower serve` with the fake trainer."""
import requests

from test_server import seed_config, submit, wait_dataset

FAST = ("--backoff", "0.2", "--backoff-cap", "1", "--grace", "1", "--max-restarts", "0")
CSV = "a,b,label\n" + "".join(f"{i},{i * 2},{i % 2}\n" for i in range(40))


def test_fields_choose_what_a_listed_run_shows(serve, tool):
    server = serve("--trainer", tool("tw_faketrain"), *FAST, env={"TW_FAKE": "step_ms=1"})
    r = requests.post(server.api("/datasets?name=tab&label_column=label"), data=CSV,
                      headers={"Content-Type": "text/csv"}, timeout=30)
    assert wait_dataset(server, r.json()["id"])["status"] == "ready"
    ids = [submit(server, seed_config(dataset="tab", steps=5, name=f"r{i}")).json()["id"] for i in range(3)]

    full = requests.get(server.api("/runs?limit=1000"), timeout=10).json()
    assert [run["id"] for run in full["runs"]] == ids[::-1] and full["total"] == 3
    assert all("config" in run and "dataset" in run and "metrics" in run for run in full["runs"])

    few = requests.get(server.api("/runs?limit=2&fields=name,status"), timeout=10).json()
    assert few["total"] == 3 and few["limit"] == 2
    assert [set(run) for run in few["runs"]] == [{"id", "name", "status"}] * 2  # id always
    assert [run["name"] for run in few["runs"]] == ["r2", "r1"]

    cfg = requests.get(server.api("/runs?fields=config,dataset"), timeout=10).json()["runs"][0]
    assert set(cfg) == {"id", "config", "dataset"} and cfg["dataset"]["name"] == "tab"
    assert cfg["config"] == requests.get(server.api(f"/runs/{ids[2]}"), timeout=10).json()["config"]

    for bad, named in (("name,bogus", "'bogus'"), ("", "''"), ("name,", "''"), ("x" * 1025, "1024")):
        r = requests.get(server.api("/runs"), params={"fields": bad}, timeout=10)
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["code"] == "INVALID_ARGUMENT" and named in r.json()["error"]["message"]
    r = requests.get(server.api("/runs?limit=1001&fields=id"), timeout=10)  # the cap on limit stays
    assert r.status_code == 400 and "limit" in r.json()["error"]["message"]
