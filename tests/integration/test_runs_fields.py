"""GET /api/v1/runs?fields=… chooses the fields each listed run shows (server/api_runs_list.c);
without it every field but the bulky config and class_names (the run's own route has them), fields=all or *
every field. A real `tower serve` with the fake trainer."""
import requests

from test_server import seed_config, submit, wait_dataset, wait_run

FAST = ("--backoff", "0.2", "--backoff-cap", "1", "--grace", "1", "--max-restarts", "0")
CSV = "a,b,label\n" + "".join(f"{i},{i * 2},{i % 2}\n" for i in range(40))


def test_fields_choose_what_a_listed_run_shows(serve, tool):
    server = serve("--trainer", tool("tw_faketrain"), *FAST, env={"TW_FAKE": "step_ms=1"})
    r = requests.post(server.api("/datasets?name=tab&label_column=label"), data=CSV,
                      headers={"Content-Type": "text/csv"}, timeout=30)
    assert wait_dataset(server, r.json()["id"])["status"] == "ready"
    ids = [submit(server, seed_config(dataset="tab", steps=5, name=f"r{i}")).json()["id"] for i in range(3)]

    assert [wait_run(server, i)["status"] for i in ids] == ["succeeded"] * 3  # settled: two reads agree
    listed = requests.get(server.api("/runs?limit=1000"), timeout=10).json()
    assert [run["id"] for run in listed["runs"]] == ids[::-1] and listed["total"] == 3
    one = requests.get(server.api(f"/runs/{ids[2]}"), timeout=10).json()
    assert "config" in one and "class_names" in one  # the run's own route keeps everything
    assert set(listed["runs"][0]) == set(one) - {"config", "class_names"}
    assert all("dataset" in run and "metrics" in run and "warnings" in run for run in listed["runs"])
    for every in ("all", "*"):
        full = requests.get(server.api("/runs"), params={"fields": every}, timeout=10).json()
        assert [run["id"] for run in full["runs"]] == ids[::-1]
        assert full["runs"][0] == one

    few = requests.get(server.api("/runs?limit=2&fields=name,status"), timeout=10).json()
    assert few["total"] == 3 and few["limit"] == 2
    assert [set(run) for run in few["runs"]] == [{"id", "name", "status"}] * 2  # id always
    assert [run["name"] for run in few["runs"]] == ["r2", "r1"]

    cfg = requests.get(server.api("/runs?fields=config,dataset"), timeout=10).json()["runs"][0]
    assert set(cfg) == {"id", "config", "dataset"} and cfg["dataset"]["name"] == "tab"
    assert cfg["config"] == requests.get(server.api(f"/runs/{ids[2]}"), timeout=10).json()["config"]

    for bad, named in (("name,bogus", "'bogus'"), ("", "''"), ("name,", "''"), ("x" * 1025, "1024"),
                       ("all,name", "'all'"), ("**", "'**'")):
        r = requests.get(server.api("/runs"), params={"fields": bad}, timeout=10)
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["code"] == "INVALID_ARGUMENT" and named in r.json()["error"]["message"]
    r = requests.get(server.api("/runs?limit=1001&fields=id"), timeout=10)  # the cap on limit stays
    assert r.status_code == 400 and "limit" in r.json()["error"]["message"]
