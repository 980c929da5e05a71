#!/usr/bin/python3
"""Runs hpctrain commands through its test fork server (src/cli/fork_server.hpp says why).

As a module (fuzz.py, docs_examples.py):
    server = ForkServer(binary, socket_path, env)     # starts `hpctrain` serving on the socket
    how, value = server.run(args, cwd=..., env=..., stdout=fd, stderr=fd, timeout=s)
    server.close()
The scripts' client, a stand-in for the binary (one process, or each rank under mpirun), is
tests/support/fork_client.cpp: the same protocol, a few milliseconds a command instead of tens.
tests/e2e/runtime/fork_server_test.sh holds it to the binary's own processes."""
import json
import os
import socket
import subprocess
import tempfile
import time


class ForkServerError(RuntimeError):
    pass


def request(socket_path, argv, cwd=None, env=None, stdin=0, stdout=1, stderr=2, timeout=None,
            on_pid=None):
    """One command in a child of the server at socket_path. Returns ("exit", code),
    ("signal", number) or ("timeout", None) (the command was killed after `timeout` seconds)."""
    env = os.environ if env is None else env
    line = json.dumps({"argv": list(argv), "cwd": cwd or os.getcwd(),
                       "env": [f"{k}={v}" for k, v in env.items()]}) + "\n"
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(socket_path)
        data = line.encode()
        socket.send_fds(conn, [data[:1]], [stdin, stdout, stderr])
        conn.sendall(data[1:])
        conn.settimeout(timeout)
        replies = conn.makefile("rb")
        try:
            first = json.loads(replies.readline() or b"{}")
            if "pid" not in first:
                raise ForkServerError(first.get("error", "the fork server gave no answer"))
            if on_pid:
                on_pid(first["pid"])
            last = json.loads(replies.readline() or b"{}")
        except (socket.timeout, TimeoutError):
            return "timeout", None  # closing the connection kills the command
    finally:
        conn.close()
    if "exit" in last:
        return "exit", last["exit"]
    if "signal" in last:
        return "signal", last["signal"]
    raise ForkServerError(last.get("error", "the fork server ended without an answer"))


class ForkServer:
    """`hpctrain` serving forks on socket_path, for as long as this object lives."""

    def __init__(self, binary, socket_path, env=None, log=None):
        self.binary = binary
        if len(socket_path) >= 100:  # a Unix socket's path holds at most 107 bytes
            socket_path = tempfile.mktemp(prefix="hpctrain-fork.", dir="/tmp")
        self.socket_path = socket_path
        server_env = dict(os.environ if env is None else env,
                          HPCTRAIN_TEST_FORK_SERVER=socket_path)
        if os.path.exists(socket_path):
            os.unlink(socket_path)
        self.process = subprocess.Popen([binary], env=server_env, stdin=subprocess.DEVNULL,
                                        stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not os.path.exists(socket_path):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise ForkServerError(f"the fork server ({binary}) did not open {socket_path}")
            time.sleep(0.02)

    def run(self, args, **kwargs):
        """`binary args...` (see request)."""
        return request(self.socket_path, [self.binary] + list(args), **kwargs)

    def close(self):
        self.process.terminate()
        self.process.wait()
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

