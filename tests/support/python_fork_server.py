#!/usr/bin/python3
"""The test suite's Python fork server: the tests' Python references without importing PyTorch
each time.

Importing torch, numpy and h5py costs a Python process about 2 CPU-seconds on Debian 12; the
suite's scripts start about a hundred such references (docs/BENCHMARKS.md, "The test suite").
This server imports them once, freezes its objects out of the garbage collector's sight
(gc.freeze: a child's collections then never touch, and so never copy, the server's pages), and
for each request forks a child that runs the request's Python command line as `python3` would:
a fresh process with the request's directory, environment, standard streams and arguments, its own
`__main__`, sys.path[0] and random seeds. The child ends without the interpreter's finalisation
(which would touch every page of the loaded libraries: 0.8 CPU-s): it releases what its
`__main__` holds (files close), runs the atexit functions, flushes its streams and calls _exit.

The protocol is the hpctrain fork server's (src/cli/fork_server.hpp): one connection a request,
a JSON line {"argv": [python, args...], "cwd": DIR, "env": ["NAME=VALUE", ...]} sent with the
three descriptors of stdin, stdout and stderr; the answers {"pid": N}, then {"exit": CODE} or
{"signal": NUMBER}; a client that goes away takes its command with it.
tests/support/fork_client.cpp is the client (tests/support/forked_python runs it for $PY).

What is not run in a fork but by exec of the real interpreter, with the request's environment:
options other than `-` and `-c` (-m, -u, ...), and an environment that differs from the server's
in a variable libraries may read once (OMP_*, OPENBLAS_*, ONEDNN_*, TORCH_*, LD_*, PYTHON* other
than PYTHONPATH and PYTHONDONTWRITEBYTECODE, ...). The server exits when its socket file is
removed or replaced, or after an hour without requests.

    python_fork_server.py SOCKET [MODULE...]   (modules to import; default numpy h5py torch)
"""
import gc
import json
import os
import select
import signal
import socket
import sys
import time
import warnings

LOAD_TIME_PREFIXES = ("OMP_", "GOMP_", "KMP_", "OPENBLAS_", "MKL_", "TORCH_", "PYTORCH_", "LD_",
                      "MALLOC_", "CUDA", "HDF5_", "ONEDNN_", "DNNL_", "MKLDNN_", "PYTHON")
HANDLED = {"PYTHONPATH", "PYTHONDONTWRITEBYTECODE"}
IDLE_EXIT_S = 3600


def load_time_env(env):
    return {k: v for k, v in env.items()
            if k.startswith(LOAD_TIME_PREFIXES) and k not in HANDLED}


def print_exception():
    """The traceback as python3 prints it: from the script's frames on, not this file's."""
    kind, value, tb = sys.exc_info()
    tb = tb.tb_next if tb is not None else None
    sys.excepthook(kind, value.with_traceback(tb), tb)


def run_python(argv, env, server_env):
    """In the child: runs `python3 argv[1:]` in this process (or execs the interpreter) and never
    returns."""
    real = sys.executable
    args = argv[1:]
    in_process = (not args or args[0] in ("-", "-c") or not args[0].startswith("-")) and \
        load_time_env(env) == server_env and not (args and args[0] == "-c" and len(args) < 2)
    if not in_process:
        os.execve(real, [real] + args, env)
    import atexit
    import builtins
    import io
    import random
    import types
    os.environ.clear()
    os.environ.update(env)
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    # The streams as python3 makes them: stdout line-buffered on a terminal, stderr always.
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)), line_buffering=os.isatty(1))
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)), errors="backslashreplace",
        line_buffering=True)
    if not args or args[0] == "-":
        filename, source, sys.argv, path0 = "<stdin>", sys.stdin.buffer.read(), args or [""], ""
    elif args[0] == "-c":
        filename, source, sys.argv, path0 = "<string>", args[1], ["-c"] + args[2:], ""
    else:
        filename, sys.argv = args[0], args
        path0 = os.path.dirname(os.path.realpath(filename))
        with open(filename, "rb") as f:
            source = f.read()
    extra = [p for p in env.get("PYTHONPATH", "").split(":") if p]
    sys.path[:] = [path0] + extra + sys.path[1:]
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    main = types.ModuleType("__main__")
    if filename != "<string>":  # python3 -c defines no __file__; a script on stdin has <stdin>
        main.__file__ = filename
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    code = 0
    try:
        exec(compile(source, filename, "exec"), main.__dict__)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        print_exception()
        code = -signal.SIGINT
    except BaseException:
        print_exception()
        code = 1
    # What the interpreter's exit does that a script can see: objects released (files flushed and
    # closed), atexit functions, streams flushed.
    main.__dict__.clear()
    gc.collect()
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        code = code or 120
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def handle(conn, listener, server_env):
    """In the handler process: one request, its child, its answers."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    listener.close()
    msg, fds, _flags, _addr = socket.recv_fds(conn, 1, 3)
    data = msg
    while not data.endswith(b"\n"):
        more = conn.recv(65536)
        if not more:
            os._exit(1)
        data += more
    request = json.loads(data)
    env = dict(item.split("=", 1) for item in request["env"] if "=" in item)
    try:
        os.chdir(request["cwd"])
    except OSError as e:
        conn.sendall((json.dumps({"error": f"cannot enter {request['cwd']}: {e}"}) + "\n").encode())
        os._exit(1)
    pid = os.fork()
    if pid == 0:
        try:
            conn.close()
            os.setpgid(0, 0)
            for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGALRM,
                           signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD):
                signal.signal(number, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            run_python(request["argv"], env, server_env)
        finally:
            os._exit(1)
    for fd in fds:
        os.close(fd)
    conn.sendall((json.dumps({"pid": pid}) + "\n").encode())
    child = os.pidfd_open(pid)
    readable, _, _ = select.select([conn, child], [], [])
    if child not in readable:  # the client went away first: its command goes with it
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        answer = {"signal": os.WTERMSIG(status)}
    else:
        answer = {"exit": os.WEXITSTATUS(status)}
    try:
        conn.sendall((json.dumps(answer) + "\n").encode())
    except OSError:
        pass
    os._exit(0)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: python_fork_server.py SOCKET [MODULE...]")
    path = sys.argv[1]
    # Python 3.12 and later warn at every fork of a process with threads (torch starts one); the
    # forks here run Python code only in their main thread.
    warnings.filterwarnings("ignore", message=".*multi-threaded.*fork", category=DeprecationWarning)
    for module in sys.argv[2:] or ["numpy", "h5py", "torch"]:
        __import__(module)
    server_env = load_time_env(os.environ)
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    inode = os.stat(path).st_ino
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    sys.stdout.flush()
    gc.collect()
    gc.freeze()
    print(f"python fork server: {sys.argv[2:] or 'numpy h5py torch'} loaded, serving {path}",
          flush=True)
    last = time.monotonic()
    while True:
        readable, _, _ = select.select([listener], [], [], 10)
        if not readable:
            try:
                same = os.stat(path).st_ino == inode
            except OSError:
                same = False
            if not same or time.monotonic() - last > IDLE_EXIT_S:
                return
            continue
        last = time.monotonic()
        conn, _ = listener.accept()
        if os.fork() == 0:
            try:
                handle(conn, listener, server_env)
            finally:
                os._exit(1)
        conn.close()


if __name__ == "__main__":
    main()
