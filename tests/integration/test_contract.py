"""The API contract, checked by tools no one here wrote: openapi-spec-validator validates the
OpenAPI document `tower serve` generates, and schemathesis runs its coverage, fuzzing and stateful phases
with every check against a live server that has a registered dataset and a finished run, so the `{id}`
routes are reached. Runs train with the fake trainer (tests/tools/tw_faketrain.c): nothing trains for real.
"""
import json
import subprocess
import sys

import pytest
import requests
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from conftest import ROOT

from test_server import wait_run
from test_server_hardening import csv_config, csv_dataset

# The operations a check does not apply to, each with why. Everything else runs every check. (One filter a
# section: schemathesis ORs the include-* filters of a section, so each names "METHOD PATH".)
NOT_APPLICABLE = """
# POST /api/v1/runs: a schema-valid config may still be refused with 400, for what no JSON Schema can say:
# "dataset" must name a dataset that exists and is ready, the model must fit its shape (no convolution on
# flat CSV rows), layer names must be unique, and the run must fit the server's memory (engine/memory.c).
# Its "dataset" is the registered one, so that accepted configs create runs the stateful phase follows.
[[operations]]
include-name = "POST /api/v1/runs"
checks.positive_data_acceptance.enabled = false
parameters = { "body.dataset" = "tab" }

# POST /api/v1/datasets: the body is a file whose content decides (a TFRecord with a bad CRC is 422, a part
# the converter does not know is 400); a schema cannot describe a valid IDX, NumPy, CSV or TFRecord file.
[[operations]]
include-name = "POST /api/v1/datasets"
checks.positive_data_acceptance.enabled = false

# POST /api/v1/runs/{id}/predict: each input must fit the model's input shape (a 28x28 image, rows of 784
# values), which no schema of the body can say, and the fixture's run trained with the fake trainer, whose
# checkpoint holds no model (422). test_predict.py posts the inputs it accepts.
[[operations]]
include-name = "POST /api/v1/runs/{id}/predict"
checks.positive_data_acceptance.enabled = false

# POST /api/v1/sweeps: its base config is refused as POST /api/v1/runs refuses one (above), and each key of
# its space must lead into that config ("model.layers[3]" when the model has three layers is 400), which no
# schema can say; test_sweeps.py posts the sweeps it accepts.
[[operations]]
include-name = "POST /api/v1/sweeps"
checks.positive_data_acceptance.enabled = false

# POST /api/v1/runs/{id}/evaluate: "dataset" must name a ready dataset whose shape and classes fit the run's
# model, and the run must keep the checkpoint named; test_evaluation.py posts the bodies it accepts.
[[operations]]
include-name = "POST /api/v1/runs/{id}/evaluate"
checks.positive_data_acceptance.enabled = false
"""


def schemathesis_config(run_id, dataset_id):
    """The project config: bounded examples, every check, and the ids of the registered run and dataset
    for the `{id}` routes that read or act (a DELETE gets the ids the stateful phase follows through the
    document's links: deleting the fixture's resources would leave the later cases nothing to reach)."""
    return f"""
[generation]
max-examples = 25
database = "none"

[checks]
enabled = true

{NOT_APPLICABLE}
# The routes under a fixture's id: their "id" is set here, so ensure_resource_availability, which takes a
# 404 after a POST for a created resource lost when every parameter was set (it assumes by a link), blames
# the POST when the stateful phase has deleted the fixture's resource through a link inferred from a list.

[[operations]]
include-name-regex = "^(GET|POST) /api/v1/runs/[{{]id[}}]"
checks.ensure_resource_availability.enabled = false
parameters = {{ "path.id" = "{run_id}" }}

[[operations]]
include-name = "GET /static/{{file}}"
parameters = {{ "path.file" = "app.js" }}

[[operations]]
include-name-regex = "^(GET|POST) /api/v1/datasets/[{{]id[}}]"
checks.ensure_resource_availability.enabled = false
parameters = {{ "path.id" = "{dataset_id}" }}
"""


@pytest.fixture
def contract_server(serve, tool):
    """A server running the fake trainer, with a ready CSV dataset and a run that finished."""
    server = serve("--trainer", tool("tw_faketrain"), env={"TW_FAKE": "step_ms=1"})
    dataset = csv_dataset(server)
    r = requests.post(server.api("/runs"), json=csv_config(steps=5, checkpoint_every=0), timeout=30)
    assert r.status_code == 201, r.text
    run = wait_run(server, r.json()["id"])
    assert run["status"] == "succeeded", run
    return server, dataset, run


def openapi(server):
    r = requests.get(server.api("/openapi.json"), timeout=10)
    assert r.status_code == 200
    return r.json()


def test_the_document_is_valid_openapi(serve):
    server = serve()
    doc = openapi(server)
    validate(doc)  # raises on any violation of the OpenAPI 3.1 schema, a dangling $ref included
    schemas = doc["components"]["schemas"]
    # the config's schema comes from the engine's tables: a variant's keys, ranges and enums
    config = schemas["RunConfig"]
    layer = config["properties"]["model"]["properties"]["layers"]["items"]
    dense = next(b for b in layer["oneOf"] if b["properties"]["type"] == {"const": "dense"})
    assert dense["properties"]["units"]["maximum"] == 65536 and "units" in dense["required"]
    assert "train" not in json.dumps(config["properties"]["dataset"])  # a run reads only uploaded datasets
    assert {"name", "max_restarts", "deadline_s"} <= set(config["properties"])
    # the envelope's codes are http.c's table; no token, no security requirement
    assert "METHOD_NOT_ALLOWED" in schemas["ErrorBody"]["properties"]["code"]["enum"]
    assert "securitySchemes" not in doc["components"]
    assert not any("security" in op for ops in doc["paths"].values() for op in ops.values())
    # every example config, as the API takes it, is valid; a key its optimizer does not use is not
    validator = Draft202012Validator({**config, "components": doc["components"]})
    for example in sorted((ROOT / "examples").glob("*.json")):
        cfg = json.loads(example.read_text())
        cfg["dataset"] = {"name": "fashion-mnist", **{k: v for k, v in cfg["dataset"].items()
                                                     if k not in ("train", "test")}}
        assert not list(validator.iter_errors(cfg)), example
        assert not validator.is_valid({**cfg, "optimizer": {"type": "sgd", "momentum": 0.5}})
    # a 201 links to the resource it created
    created = doc["paths"]["/api/v1/runs"]["post"]["responses"]["201"]
    assert created["links"]["get_api_v1_runs_id"] == {"operationId": "get_api_v1_runs_id",
                                                      "parameters": {"id": "$response.body#/id"}}


def test_bearer_security_only_with_a_token(serve):
    server = serve(token="s3cret")
    doc = openapi(server)
    validate(doc)
    assert doc["components"]["securitySchemes"] == {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert ("security" in op) == (method != "get"), (method, path)


def test_405_lists_the_allowed_methods(serve):
    server = serve()
    r = requests.put(server.api("/runs"), timeout=10)
    assert r.status_code == 405 and r.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    assert r.headers["Allow"] == "GET, HEAD, POST"
    r = requests.post(server.api("/runs/r0000000000000000"), timeout=10)
    assert r.status_code == 405 and r.headers["Allow"] == "GET, HEAD, DELETE"


def test_an_error_quoting_a_cut_character_keeps_its_message(serve):
    """Found by schemathesis: a query key of 4-byte characters, cut at 64 bytes inside one in the message,
    left the envelope empty ({}), as jansson refuses a string that is not UTF-8."""
    server = serve()
    r = requests.get(server.api("/runs?a" + "\U0001d47b" * 20 + "=1"), timeout=10)  # byte 64: inside one
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "INVALID_ARGUMENT" and "unknown query parameter" in r.json()["error"]["message"]


def test_a_run_whose_dataset_was_deleted_names_it_null(contract_server):
    """Found by schemathesis: the run's "dataset" lost its "name" key instead of showing null."""
    server, dataset, run = contract_server
    assert requests.delete(server.api(f"/datasets/{dataset['id']}"), timeout=10).status_code == 204
    shown = requests.get(server.api(f"/runs/{run['id']}"), timeout=10).json()
    assert shown["dataset"] == {"id": dataset["id"], "name": None}


def test_schemathesis_finds_no_failure(contract_server, tmp_path):
    server, dataset, run = contract_server
    config = tmp_path / "schemathesis.toml"
    config.write_text(schemathesis_config(run["id"], dataset["id"]))
    cmd = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run",
           server.api("/openapi.json"), "--phases", "coverage,fuzzing,stateful",
           "--workers", "1", "--seed", "1", "--request-timeout", "10", "--no-color",
           "--report", "junit", "--report-dir", str(tmp_path / "report")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=150, cwd=tmp_path)  # its cache: not the repo
    tail = (out.stdout + out.stderr)[-12000:]
    print(tail)  # the summary, shown with -rP
    assert out.returncode == 0, tail
    assert "Stateful" in tail and "Coverage" in tail and "Fuzzing" in tail, tail
