"""The torchrun-variable rendezvous (world/rendezvous.h) on loopback, through tests/tools/tw_rendezvous: rank 0
makes a random token and hands it to every rank the way a CUDA world hands out its 128-byte NCCL unique id.

Each test starts real processes with the variables a launcher sets (torchrun / PyTorchJob, Slurm, Open MPI, a
Kubernetes Indexed Job) and checks what every rank printed or why it failed. No sleeps: a test waits for a
process to end or for a port to accept, each with a bound.
"""
import json
import os
import socket
import struct
import subprocess
import time

import pytest

import helpers

# Every variable the rendezvous reads; a test's environment starts without any of them.
WORLD_VARS = ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "SLURM_PROCID", "SLURM_NTASKS",
              "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "JOB_COMPLETION_INDEX"]
BOUND_S = 60  # no process of these tests may take longer; the tool's own time-outs are far shorter



@pytest.fixture
def world(tool):
    """world(rank_env, *args) starts one rank with MASTER_ADDR/MASTER_PORT of this test's world plus
    rank_env (None values unset a variable); returns the Popen. finish(p) -> (rc, parsed stdout, stderr)."""
    port = helpers.free_port()
    procs = []

    def start(rank_env, *args):
        env = {k: v for k, v in os.environ.items() if k not in WORLD_VARS}
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        for k, v in rank_env.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        p = subprocess.Popen([str(tool("tw_rendezvous")), *map(str, args)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(p)
        return p

    start.port = port
    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate()


def finish(p):
    out, err = p.communicate(timeout=BOUND_S)
    return p.returncode, (json.loads(out) if out.strip() else None), err


def wait_listening(port):
    """Returns once something accepts on 127.0.0.1:port (rank 0 listens), polling with a bound."""
    end = time.monotonic() + BOUND_S
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()  # a stray, too
            return
        except OSError:
            time.sleep(0.05)  # the poll's interval: connection refused until rank 0 listens
    raise AssertionError(f"nothing listens on {port}")


def assert_one_token(results, size):
    assert sorted(r["rank"] for r in results) == list(range(size))
    assert {r["size"] for r in results} == {size}
    tokens = {r["token"] for r in results}
    assert len(tokens) == 1, tokens
    token = tokens.pop()
    assert len(token) == 2 * 128 and token != "00" * 128  # 128 random bytes, as an NCCL id


@pytest.mark.parametrize("size", [2, 3])
def test_ranks_get_rank_zeros_token(world, size):
    # the peers first: they retry until rank 0 listens
    procs = [world({"WORLD_SIZE": str(size), "RANK": str(r)}, "--timeout", 20)
             for r in range(size - 1, -1, -1)]
    results = []
    for p in procs:
        rc, out, err = finish(p)
        assert rc == 0, err
        results.append(out)
    assert_one_token(results, size)
    assert {r["rank_from"] for r in results} == {"RANK"}


@pytest.mark.parametrize("rank_var,size_env", [
    ("SLURM_PROCID", {"SLURM_NTASKS": "2"}),
    ("OMPI_COMM_WORLD_RANK", {"OMPI_COMM_WORLD_SIZE": "2"}),
    ("JOB_COMPLETION_INDEX", {"WORLD_SIZE": "2"}),
])
def test_rank_from_the_launchers_variables(world, rank_var, size_env):
    procs = [world({rank_var: str(r), **size_env}, "--timeout", 20) for r in (1, 0)]
    results = []
    for p in procs:
        rc, out, err = finish(p)
        assert rc == 0, err
        results.append(out)
    assert_one_token(results, 2)
    assert {r["rank_from"] for r in results} == {rank_var}


@pytest.mark.parametrize("env,named", [
    ({"WORLD_SIZE": "2", "RANK": "5"}, "RANK=5 is not below WORLD_SIZE=2"),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "0"}, "MASTER_PORT=0"),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "65536"}, "MASTER_PORT=65536"),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "29x"}, "MASTER_PORT='29x'"),
    ({"WORLD_SIZE": "two", "RANK": "0"}, "WORLD_SIZE='two'"),
    ({"WORLD_SIZE": "0", "RANK": "0"}, "WORLD_SIZE=0"),
    ({"WORLD_SIZE": "5000", "RANK": "0"}, "WORLD_SIZE=5000"),
    ({"WORLD_SIZE": "2", "RANK": "-1"}, "RANK='-1'"),
    ({"WORLD_SIZE": "2", "RANK": " 1"}, "RANK=' 1'"),
    ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": ""}, "MASTER_ADDR is empty"),
    ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "a b"}, "MASTER_ADDR='a b'"),
    ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_PORT": None}, "MASTER_PORT is not set"),
    ({"WORLD_SIZE": "2"}, "RANK is not set"),
    ({"RANK": "1"}, "WORLD_SIZE is not set"),
    ({"JOB_COMPLETION_INDEX": "1", "WORLD_SIZE": None}, "WORLD_SIZE is not set"),
])
def test_a_bad_variable_exits_2_naming_it(world, env, named):
    rc, out, err = finish(world(env, "--timeout", 5))
    assert rc == 2 and out is None, (rc, err)
    assert named in err, err


def test_no_world_in_the_environment_is_a_usage_error(world):
    rc, _, err = finish(world({"MASTER_ADDR": None, "MASTER_PORT": None}))
    assert rc == 2 and "no world" in err


def test_a_missing_rank_0_ends_the_peers_with_a_timeout(world):
    peers = [world({"WORLD_SIZE": "3", "RANK": str(r)}, "--timeout", 1) for r in (1, 2)]
    for p in peers:
        rc, out, err = finish(p)
        assert rc == 1 and out is None
        assert "timed out after 1s" in err and "no answer from rank 0" in err, err


def test_rank_0_times_out_naming_the_missing_ranks(world):
    rc, _, err = finish(world({"WORLD_SIZE": "4", "RANK": "0"}, "--timeout", 1))
    assert rc == 1 and "1 of 4 ranks came" in err and "missing rank 1, 2, 3" in err, err


def test_stray_connections_do_not_break_the_world(world):
    rank0 = world({"WORLD_SIZE": "2", "RANK": "0"}, "--timeout", 20)
    wait_listening(world.port)
    garbage = socket.create_connection(("127.0.0.1", world.port), timeout=5)
    garbage.sendall(b"GET / HTTP/1.0\r\n\r\n" * 4)
    silent = socket.create_connection(("127.0.0.1", world.port), timeout=5)
    almost = socket.create_connection(("127.0.0.1", world.port), timeout=5)
    almost.sendall(b"TWRZ\0\0")  # a hello's start, never finished
    try:
        rank1 = world({"WORLD_SIZE": "2", "RANK": "1"}, "--timeout", 20)
        results = []
        for p in (rank0, rank1):
            rc, out, err = finish(p)
            assert rc == 0, err
            results.append(out)
        assert_one_token(results, 2)
        garbage.settimeout(5)
        try:
            got = garbage.recv(100)
        except ConnectionResetError:  # closed with the garbage unread: a reset instead of an end
            got = b""
        assert got == b""  # rank 0 closed it without an answer
    finally:
        for s in (garbage, silent, almost):
            s.close()


def test_a_second_rank_1_is_refused(world):
    rank0 = world({"WORLD_SIZE": "3", "RANK": "0"}, "--timeout", 30)
    ones = [world({"WORLD_SIZE": "3", "RANK": "1"}, "--timeout", 30) for _ in range(2)]
    # rank 0 answers nobody before rank 2 comes, so the one refused is the one that ends now
    end = time.monotonic() + BOUND_S
    while all(p.poll() is None for p in ones):
        assert time.monotonic() < end, "no rank 1 was refused"
        try:
            ones[0].wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
    refused = next(p for p in ones if p.poll() is not None)
    joined = next(p for p in ones if p is not refused)
    rc, out, err = finish(refused)
    assert rc == 1 and out is None
    assert "refused RANK=1" in err and "already joined" in err, err
    rank2 = world({"WORLD_SIZE": "3", "RANK": "2"}, "--timeout", 30)
    results = []
    for p in (rank0, joined, rank2):
        rc, out, err = finish(p)
        assert rc == 0, err
        results.append(out)
    assert_one_token(results, 3)


def test_a_rank_of_another_world_size_is_refused(world):
    rank0 = world({"WORLD_SIZE": "2", "RANK": "0"}, "--timeout", 3)
    rc, out, err = finish(world({"WORLD_SIZE": "3", "RANK": "1"}, "--timeout", 20))
    assert rc == 1 and "its world has 2 processes, this rank's WORLD_SIZE=3" in err, err
    rc, _, err = finish(rank0)
    assert rc == 1 and "missing rank 1" in err


def test_a_world_of_one_needs_no_peer(world):
    rc, out, err = finish(world({"WORLD_SIZE": "1", "RANK": "0"}, "--timeout", 1))
    assert rc == 0, err
    assert out["rank"] == 0 and out["size"] == 1 and len(out["token"]) == 256


def raw_rank(port, rank, size, version=1, nbytes=128):
    """A rank speaking the protocol by hand (world/rendezvous.c's header): connects and sends its hello."""
    s = socket.create_connection(("127.0.0.1", port), timeout=BOUND_S)
    s.sendall(b"TWRZ" + struct.pack(">IIII", version, size, rank, nbytes))
    return s


def read_answer(s, nbytes=128):
    """(verdict, detail, blob) of rank 0's answer on s (blob only for verdict 0)."""
    def exactly(n):
        got = b""
        while len(got) < n:
            chunk = s.recv(n - len(got))
            if not chunk:
                raise EOFError(f"closed after {len(got)} of {n} bytes")
            got += chunk
        return got
    head = exactly(16)
    assert head[:4] == b"TWRZ" and struct.unpack(">I", head[4:8])[0] == 1
    verdict, detail = struct.unpack(">II", head[8:16])
    return verdict, detail, exactly(nbytes) if verdict == 0 else None


def test_a_joined_rank_that_dies_frees_its_place(world):
    rank0 = world({"WORLD_SIZE": "3", "RANK": "0"}, "--timeout", 30)
    wait_listening(world.port)
    first = raw_rank(world.port, 1, 3)
    # a second rank 1 is refused as a duplicate: the first has joined
    rc, _, err = finish(world({"WORLD_SIZE": "3", "RANK": "1"}, "--timeout", 30))
    assert rc == 1 and "already joined" in err, err
    first.close()  # the joined rank dies
    end = time.monotonic() + BOUND_S
    rank2 = None
    while True:  # its restart is refused until rank 0 has seen it go, then taken
        again = raw_rank(world.port, 1, 3)
        again.settimeout(0.2 if rank2 is None else BOUND_S)
        try:
            verdict, detail, token = read_answer(again)
        except socket.timeout:  # no answer yet: it joined (or rank 0 is slow), rank 2 completes the world
            if rank2 is None:
                rank2 = world({"WORLD_SIZE": "3", "RANK": "2"}, "--timeout", 30)
            again.settimeout(BOUND_S)
            verdict, detail, token = read_answer(again)
        again.close()
        if verdict == 0:
            break
        assert (verdict, detail) == (4, 1)  # DUPLICATE of rank 1: rank 0 has not seen it go yet
        assert time.monotonic() < end, "the dead rank's place was never freed"
    results = []
    for p in (rank0, rank2):
        rc, out, err = finish(p)
        assert rc == 0, err
        results.append(out)
    results.append({"rank": 1, "size": 3, "token": token.hex()})
    assert_one_token(results, 3)


def test_another_protocol_version_is_refused(world):
    rank0 = world({"WORLD_SIZE": "2", "RANK": "0"}, "--timeout", 30)
    wait_listening(world.port)
    s = raw_rank(world.port, 1, 2, version=7)
    verdict, detail, _ = read_answer(s)
    s.close()
    assert (verdict, detail) == (1, 1)  # BAD_VERSION, rank 0 speaks 1
    rc, _, err = finish(world({"WORLD_SIZE": "2", "RANK": "1"}, "--timeout", 30))
    assert rc == 0, err
    assert finish(rank0)[0] == 0


def test_ranks_that_joined_hear_that_rank_0_gave_up(world):
    rank0 = world({"WORLD_SIZE": "3", "RANK": "0"}, "--timeout", 2)
    rank1 = world({"WORLD_SIZE": "3", "RANK": "1"}, "--timeout", 50)
    rc, _, err = finish(rank0)
    assert rc == 1 and "missing rank 2" in err, err
    rc, _, err = finish(rank1)  # long before its own 50 s
    assert rc == 1 and "its rendezvous timed out with 2 of 3 ranks" in err, err


def test_a_training_world_and_a_shared_blob_do_not_mix(world, tower_bin, tmp_path):
    """`tower train`'s rank 0 joins the TCP world (world/world_tcp.c: tw_rendezvous_connect, nothing
    shared): a rank that expects a blob is refused with the sizes, and rank 0 times out naming it. The world
    is joined before the config is read, so no config is needed to show it."""
    env = {k: v for k, v in os.environ.items() if k not in WORLD_VARS}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(world.port), WORLD_SIZE="2", RANK="0",
               TOWER_RENDEZVOUS_TIMEOUT="3")
    rank0 = subprocess.Popen([str(tower_bin), "train", str(tmp_path / "none.json"), "--logdir",
                              str(tmp_path / "run")], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        rc, _, err = finish(world({"WORLD_SIZE": "2", "RANK": "1"}, "--timeout", 30))
        assert rc == 1 and "refused RANK=1: it shares 0 bytes, this rank expects 128" in err, err
        _, err0 = rank0.communicate(timeout=BOUND_S)
    finally:
        if rank0.poll() is None:
            rank0.kill()
        rank0.communicate()
    assert rank0.returncode == 1 and "missing rank 1" in err0, err0
    assert not (tmp_path / "run").exists()
