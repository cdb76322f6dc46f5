"""Programs -> MAX graphs -> compiled models -> callables.

``build_graph`` replays a ``Program``'s instructions into a ``max.graph.Graph`` through the
lowering table, then casts/reshapes every result to the physical (dtype, shape) the shape
rules predicted. ``get_executable`` finds or makes the compiled model: memory cache, then the
on-disk ``.mef`` cache, then ``session.compile`` + ``session.init`` (and ``export_mef``).
Background compiles run one at a time, each in a worker process (``worker.py``) that stores
the model in the disk cache, from which this process then loads it in milliseconds; a daemon
thread here waits for them, so the interpreter keeps serving calls. At interpreter exit,
queued compiles are dropped and one in progress ends with the program: the worker process
is told to stop (it keeps a model it has finished by writing it first) and no process
outlives this one; with ``NABLA_COMPILE_DETACH=1`` it is left to finish and cache its
model for the next run instead (``worker.py``). Exit never waits for a compile. (A program
the disk cache cannot hand over compiles on the thread itself; exit waits for that one,
because a thread still inside MAX during interpreter finalization aborts the process.)

An ``Executable`` takes NumPy arrays (CPU inputs, wrapped zero-copy with
``Buffer.from_numpy``) or MAX ``Buffer``s (accelerator inputs) and returns NumPy arrays for
host outputs (zero-copy ``to_numpy``) and ``Buffer``s for accelerator outputs. bfloat16
crosses the NumPy boundary as a uint16 bit view.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import queue
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from typing import NamedTuple

import ml_dtypes
import numpy as np
from max import driver, engine
from max.dtype import DType as MDType
from max.graph import Graph, TensorType, ops

from ...core.config import CONFIG, debug_log
from ...core.device import CPU, Device
from ...core.ir import Program, SymDim, has_symdim, nested_programs
from ..kernels import KernelError, kernel_instructions
from . import cache
from .disk import DISK
from .kernels import compiler_message, extensions_for
from .lowerings import (
    LOWERINGS,
    SIZE_KWARGS,
    UnsupportedOnMax,
    device_ref,
    ieee_not_equal,
    max_dims,
    max_dtype,
    unsupported_reason,
)
from .worker import Job

__all__ = [
    "get_executable",
    "ready",
    "pending_compile",
    "Executable",
    "check_program",
    "build_graph",
]

LOG = logging.getLogger("nabla.max")
MEMORY = cache.MemoryCache()
_UNSUPPORTED: dict = {}  # ident(program) -> the UnsupportedOnMax or compile error
_INFLIGHT: dict = {}  # ident(program) -> Future of an Executable
_STATE = threading.Lock()
_COMPILE = threading.Lock()  # one compile at a time (MAX serialises them anyway; caps RSS)
_CPU0 = CPU()
_BF16 = np.dtype(ml_dtypes.bfloat16)


# ----------------------------------------------------------------------------- devices
_DRIVER_DEVICES: dict = {}
_SESSIONS: dict = {}


def driver_device(device):
    """nabla ``Device`` -> a (cached) ``max.driver`` device."""
    dev = _DRIVER_DEVICES.get(device)
    if dev is None:
        if device.is_cpu:
            dev = driver.CPU()
        else:
            if driver.accelerator_count() <= device.id:
                raise RuntimeError(
                    f"{device} was requested but MAX sees {driver.accelerator_count()} "
                    "accelerator(s) on this machine"
                )
            dev = driver.Accelerator(device.id)
        _DRIVER_DEVICES[device] = dev
    return dev


def _session(devices: tuple):
    sess = _SESSIONS.get(devices)
    if sess is None:
        order = [d for d in devices if not d.is_cpu] + [_CPU0]
        sess = engine.InferenceSession(devices=[driver_device(d) for d in order])
        _SESSIONS[devices] = sess
    return sess


def op_device(name: str, kwargs: dict, arg_devices: list):
    """Where an instruction runs: its ``device`` kwarg (transfer, creation ops), else the
    first accelerator among its inputs, else the first input's device (CPU)."""
    dev = kwargs.get("device")
    if isinstance(dev, Device):
        return dev
    for d in arg_devices:
        if not d.is_cpu:
            return d
    return arg_devices[0] if arg_devices else _CPU0


def _walk(program):
    """Yield (instr, input dtypes, op device) in order, tracking slot dtypes and devices."""
    dts = [s.dtype for s in program.inputs]
    devs = [s.device for s in program.inputs]
    for instr in program.instructions:
        dev = op_device(instr.op, instr.kwargs, [devs[i] for i in instr.inputs])
        yield instr, [dts[i] for i in instr.inputs], dev
        need = max(instr.outputs) + 1 if instr.outputs else 0
        if need > len(dts):
            dts.extend([None] * (need - len(dts)))
            devs.extend([None] * (need - len(devs)))
        for o, spec in zip(instr.outputs, instr.out_specs):
            dts[o] = spec[0]
            devs[o] = dev


def check_program(program) -> tuple:
    """Raise ``UnsupportedOnMax`` for the first op MAX cannot run; else return the devices."""
    used = {s.device for s in program.inputs}
    for instr, in_dts, dev in _walk(program):
        nested = nested_programs(instr.kwargs)
        for sub in nested:  # compiled_call and control-flow bodies: check their instructions
            used.update(check_program(sub))
        if instr.op == "compiled_call":
            continue
        specs = instr.out_specs
        dtypes = (in_dts or [specs[0][0]]) if specs else in_dts
        reason = unsupported_reason(instr.op, dtypes, dev)
        if reason is not None:
            dt = dtypes[0] if dtypes else None
            raise UnsupportedOnMax(instr.op, dt, dev, reason)
        used.add(dev)
    return tuple(sorted(used, key=lambda d: (d.kind != "cpu", d.kind, d.id)))


def ident(program):
    """In-process identity of a program: its content digest (or its key if not canonical)."""
    digest = cache.content_digest(program)
    return ("content", digest) if digest is not None else ("key", program.key)


# ----------------------------------------------------------------------------- graph building
def _fix(value, dtype, shape):
    mdt = max_dtype(dtype)
    if value.dtype != mdt:
        if dtype.is_bool:
            value = ieee_not_equal(value, ops.constant(0, value.dtype, device=value.device))
        else:
            value = ops.cast(value, mdt)
    target = max_dims(tuple(shape))
    if [str(d) for d in value.shape] != [str(d) for d in target]:
        # a derived symbolic size prints as MAX simplified it ((n * 4) // 2 as n * 2): at
        # the same rank the lowering's own dims stand; a rank change (a reduction's kept
        # axis) or a static shape gets the reshape
        symbolic = any(not isinstance(d, int) for d in shape)
        if len(value.shape) != len(target) or not symbolic:
            value = ops.reshape(value, target)
    return value


def replay(program, inputs: list) -> list:
    """Lower ``program``'s instructions onto graph values ``inputs`` (inside an open Graph);
    returns the values of its output slots. Also inlines nested ``compiled_call`` programs."""
    vals: dict = dict(enumerate(inputs))
    for (op, ins, kwargs, outs, specs), in_dts, dev in _walk(program):
        args = [vals[i] for i in ins]
        if op != "transfer":
            ref = device_ref(dev)
            args = [a if a.device == ref else ops.transfer_to(a, ref) for a in args]
        sized = SIZE_KWARGS.get(op)
        if sized:  # symbolic sizes (a program compiled once for every size) as MAX dims
            kwargs = {k: max_dims(v) if k in sized else v for k, v in kwargs.items()}
        try:
            res = LOWERINGS[op](args, kwargs)
            res = [_fix(v, dt, shape) for v, (dt, shape) in zip(res, specs, strict=True)]
        except (UnsupportedOnMax, KernelError):
            raise
        except Exception as e:  # noqa: BLE001 - MAX graph errors carry MLIR text
            if op != "custom_kernel":
                raise _lowering_error(op, in_dts, specs, dev, e) from None
            raise KernelError(
                f"custom op {kwargs['op']!r}: MAX rejected Mojo kernel {kwargs['kernel']!r} "
                f"from {kwargs['package'] or 'its kernel()'}: {e}"
            ) from None
        for o, v in zip(outs, res):
            vals[o] = v
    return [vals[s] for s in program.outputs]


def _lowering_error(op, in_dts, specs, dev, e):
    """A failed lowering as ``UnsupportedOnMax`` (MAX graph errors carry MLIR text: kept in
    ``detail`` and the debug log, not the message)."""
    dt = in_dts[0] if in_dts else specs[0][0]
    err = UnsupportedOnMax(op, dt, dev, f"MAX could not lower it: {type(e).__name__}")
    err.detail = str(e)
    LOG.debug("lowering %s failed: %s", op, e)
    return err


def build_graph(program, name: str = "nabla"):
    """Replay ``program`` into a ``max.graph.Graph`` whose outputs are its output slots.

    A program holding custom kernels gets their precompiled packages as
    ``custom_extensions`` (built once per package content, ``kernels.py``); others get none."""
    input_types = [
        TensorType(max_dtype(dt), tuple(shape), device=device_ref(dev))
        for dt, shape, dev in program.inputs
    ]
    extensions = extensions_for(program)
    with Graph(name, input_types=input_types, custom_extensions=extensions) as graph:
        graph.output(*replay(program, [v.tensor for v in graph.inputs]))
    return graph


# ----------------------------------------------------------------------------- executables
# NumPy dtypes crossing as a same-width bit view: bfloat16 has no DLPack code, and MAX's
# from_numpy fails on 0-d bool arrays (its internal bool view needs a last axis).
_VIEWS = {"bfloat16": (np.uint16, MDType.bfloat16), "bool": (np.uint8, MDType.bool)}


def _cpu_in(kind: str):
    view = _VIEWS.get(kind)

    def conv(a):
        if type(a) is not np.ndarray:
            if isinstance(a, driver.Buffer):
                return a if a.is_host else a.to(driver_device(_CPU0))
            a = np.asarray(a)
        if view is not None:
            return driver.Buffer.from_numpy(a.view(view[0])).view(view[1], a.shape)
        return driver.Buffer.from_numpy(a)

    return conv


def _dev_in(device, kind: str):
    host = _cpu_in(kind)

    def conv(a):
        target = driver_device(device)
        if isinstance(a, driver.Buffer) and a.device == target:
            return a
        return host(a).to(target)

    return conv


def _out(bf16: bool):
    if bf16:
        return lambda o: o.view(MDType.uint16, o.shape).to_numpy().view(_BF16) if o.is_host else o
    return lambda o: o.to_numpy() if o.is_host else o


# Host inputs up to this size keep their Buffer for the next call while the same array comes
# back (a compiled plan's constants, a loop's fixed weights): wrapping costs ~5 us an input,
# a tenth of a small program's call. Larger ones are not held past the call.
_KEEP_BUFFER_BYTES = 1 << 16


class Executable:
    """A compiled program: ``exe(list_of_inputs) -> list_of_outputs``."""

    __slots__ = ("model", "source", "num_ops", "_in", "_out", "_kept", "_run", "__weakref__")

    def __init__(self, model, program, source: str):
        self.model = model
        self.source = source  # "compile" | "disk"
        self.num_ops = program.num_ops
        self._in = tuple(
            _cpu_in(dt.value) if dev.is_cpu else _dev_in(dev, dt.value)
            for dt, _shape, dev in program.inputs
        )
        self._out = tuple(_out(dt.value == "bfloat16") for dt, _shape in program.output_specs)
        # per CPU input: (array, its Buffer) of the last call, or None. Only a contiguous
        # array is kept: its Buffer aliases it, so it sees any write to the array, exactly
        # as a fresh wrap would (a device input is a copy: never kept)
        self._kept = [None if dev.is_cpu else False for _dt, _shape, dev in program.inputs]
        # ``execute``'s Python checks each argument's type and contiguity (~10-20 us a call
        # for 8 inputs); ours are always contiguous Buffers, so call what it ends in
        self._run = getattr(model, "_execute_device_tensors", None) or (
            lambda bufs: model.execute(*bufs)
        )

    def __call__(self, inputs):
        kept = self._kept
        bufs = []
        for k, (conv, a) in enumerate(zip(self._in, inputs)):
            last = kept[k]
            if last and last[0] is a:
                bufs.append(last[1])
                continue
            buf = conv(a)
            if (
                last is not False
                and type(a) is np.ndarray
                and a.nbytes <= _KEEP_BUFFER_BYTES
                and a.flags.c_contiguous
            ):
                kept[k] = (a, buf)
            bufs.append(buf)
        outs = self._run(bufs)
        return [c(o) for c, o in zip(self._out, outs)]

    def __repr__(self):
        return f"<MAX executable: {self.num_ops} ops, from {self.source}>"


def _accelerator_tag(devices) -> str:
    tags = []
    for d in devices:
        if not d.is_cpu:
            dev = driver_device(d)
            tags.append(f"{d}:{getattr(dev, 'architecture_name', getattr(dev, 'api', '?'))}")
    return ",".join(tags)


def make(program, devices, debug: bool, storing: threading.Event | None = None) -> Executable:
    """Disk cache, else compile (and write the disk cache). ``storing`` is set while a
    compiled model is written (a worker process's watchdog waits for that, ``worker.py``)."""
    symbolic = _symbolic_form(program)
    if symbolic is not None:
        return get_executable(symbolic, debug)
    sess = _session(devices)
    digest = cache.program_digest(program, _accelerator_tag(devices))
    if digest is None:
        return Executable(_compile(sess, program, digest, debug)[1], program, "compile")
    # the entry's lock: concurrent processes compile a program once, the others load it
    with DISK.locked(digest) as directory:
        if directory is not None:
            t0 = time.perf_counter()
            model = DISK.load(directory, digest, program, sess.load)
            if model is not None:
                dt = time.perf_counter() - t0
                cache.bump("disk_hits")
                cache.bump("disk_load_seconds", dt)
                if debug:
                    debug_log(LOG, "loaded %d-op program %s in %.3f s", program.num_ops, digest, dt)
                return Executable(model, program, "disk")
        compiled, model = _compile(sess, program, digest, debug)
        if storing is not None:
            storing.set()
        try:
            if directory is not None and DISK.store(directory, digest, program, compiled):
                cache.bump("disk_writes")
        finally:
            if storing is not None:
                storing.clear()
    return Executable(model, program, "compile")


def _compile(sess, program, digest, debug):
    """``(compiled, model)``: MAX compiles and initializes ``program`` (one at a time)."""
    with _COMPILE:  # graph building too: MAX's graph context must not interleave threads
        graph = build_graph(program, f"nabla_{(digest or 'nocache')[:16]}")
        t0 = time.perf_counter()
        kernels = sorted(
            {
                f"{i.kwargs['op']} (kernel {i.kwargs['kernel']!r}, declared output(s) "
                + ", ".join(f"{dt.value}{tuple(sh)}" for dt, sh in i.kwargs["out_types"])
                + ")"
                for i in kernel_instructions(program)
            }
        )
        try:
            if kernels:
                compiled, model = _compile_kernels(sess, graph, kernels)
            else:
                compiled = sess.compile(graph)
                model = sess.init(compiled)
        except KernelError:
            raise
        except Exception as e:
            raise RuntimeError(
                f"MAX failed to compile a {program.num_ops}-op program "
                f"(ops: {sorted({i.op for i in program.instructions})}); this is a nabla bug"
            ) from e
        dt = time.perf_counter() - t0
    cache.bump("compiles")
    cache.bump("compile_seconds", dt)
    if debug:
        kinds = len({i.op for i in program.instructions})
        debug_log(LOG, "compiled %d ops (%d kinds) in %.2f s", program.num_ops, kinds, dt)
    return compiled, model


def _compile_kernels(sess, graph, kernels):
    """Compile a graph holding custom kernels. The Mojo compiler writes a kernel's errors (a
    wrong output type, a constraint that fails for these dtypes) to the process's stderr and
    MAX raises only "Failed to compile the model"; so stderr is captured meanwhile (and
    passed on), and a failure is raised as ``KernelError`` with the compiler's message."""
    with tempfile.TemporaryFile(mode="w+b") as capture:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(capture.fileno(), 2)
        try:
            compiled = sess.compile(graph)
            model = sess.init(compiled)
            error = None
        except Exception as e:  # noqa: BLE001 - re-raised below with the compiler's words
            error = e
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        text = capture.read().decode("utf-8", errors="replace")
    if text:
        sys.stderr.write(text)
        sys.stderr.flush()
    if error is not None:
        message = compiler_message(text) or str(error)
        raise KernelError(
            f"MAX could not compile a graph holding the custom op(s) {'; '.join(kernels)}. "
            f"The Mojo compiler said:\n{message}"
        ) from error
    return compiled, model


# ----------------------------------------------------------------------------- symbolic dims
def _symbolic_form(program: Program) -> Program | None:
    """When ``program`` is verified for every size of its dynamic dims (``Program.symbolic``:
    a compiled plan run at the call), or is one ``compiled_call`` of such a program, that
    program with the dims as MAX symbolic names: one compiled model (cached in memory and
    on disk like any other) serves every size."""
    if program.symbolic:
        return program.symbolized() if _max_symbolic(program) else None
    if len(program.instructions) != 1:
        return None
    instr = program.instructions[0]
    if instr.op != "compiled_call" or not instr.kwargs["program"].symbolic:
        return None
    if instr.inputs != tuple(range(program.num_inputs)) or instr.outputs != program.outputs:
        return None
    inner = instr.kwargs["program"]
    return inner.symbolized() if _max_symbolic(inner) else None


def _max_symbolic(program: Program) -> bool:
    """Can MAX take this program's symbolic sizes as its own symbolic dims? Each one must
    sit in a kwarg the lowerings build as MAX dims (``SIZE_KWARGS``: shapes, a fill value,
    an iota's length, slice bounds) and use only MAX's dim arithmetic (``+ - * //``, no
    ``%``). Otherwise MAX compiles the program once per size."""

    def supported(obj) -> bool:
        if isinstance(obj, SymDim):
            return _no_mod(obj.expr)
        if isinstance(obj, tuple | list):
            return all(supported(o) for o in obj)
        if isinstance(obj, dict):
            return all(supported(v) for v in obj.values())
        return True

    for instr in program.instructions:
        if nested_programs(instr.kwargs):  # a body's own sizes are not symbolized
            return False
        allowed = SIZE_KWARGS.get(instr.op, ())
        slices = instr.kwargs.get("slices", ()) if instr.op == "slice" else ()
        if any(step < 0 and has_symdim((start, length)) for start, step, length in slices):
            return False  # the lowering flips a backwards slice by its length as a number
        for key, value in instr.kwargs.items():
            if has_symdim(value) and (key not in allowed or not supported(value)):
                return False
        if not supported(instr.out_specs):
            return False
    return supported(tuple(spec.shape for spec in program.inputs))


def _no_mod(expr) -> bool:
    if isinstance(expr, tuple):
        return expr[0] != "%" and _no_mod(expr[1]) and _no_mod(expr[2])
    return True


def get_executable(program, debug: bool = False) -> Executable:
    """The executable of ``program``, compiling it now if needed (waits for a background
    compile already running). Raises ``UnsupportedOnMax``."""
    key = ident(program)
    known = _UNSUPPORTED.get(key)
    if isinstance(known, UnsupportedOnMax):
        raise known
    exe = MEMORY.get(key)
    if exe is not None:
        cache.bump("memory_hits")
        return exe
    with _STATE:
        fut = _INFLIGHT.get(key)
    if fut is not None:
        return fut.result()
    devices = check_program(program)
    exe = make(program, devices, debug)
    MEMORY.put(key, exe)
    return exe


# ----------------------------------------------------------------------------- background tier
_QUEUE: queue.Queue = queue.Queue()
_WORKER: list = []


def _worker():
    while True:
        program, key, devices, debug, fut = _QUEUE.get()
        try:
            with _blas_yields_a_core():
                exe = _compile_in_child(program, devices, debug)
        except BaseException as e:  # noqa: BLE001 - reported through the future
            fut.set_exception(e)
        else:
            MEMORY.put(key, exe)
            program.executables["max"] = exe
            fut.set_result(exe)
        finally:
            with _STATE:
                _INFLIGHT.pop(key, None)


class _Child(NamedTuple):
    """A compile running in a worker process."""

    proc: subprocess.Popen
    detach: bool  # it finishes after this process exits (NABLA_COMPILE_DETACH=1)


_CHILDREN: dict = {}  # pid -> _Child
# how long the exit handler waits for a worker it ended (it exits at once unless it is
# writing a finished model, a few ms) before it kills it
_END_WAIT_S = 2.0
_IN_PROCESS = threading.Event()  # set while the worker thread itself is inside MAX
_EXITING = threading.Event()  # set at interpreter exit: start no worker process


def _in_process(fn, *args):
    _IN_PROCESS.set()
    try:
        return fn(*args)
    finally:
        _IN_PROCESS.clear()


def _package_root() -> str:
    """The directory holding the ``nabla`` package (the child imports it from there, even
    when the parent found it through a ``sys.path`` entry made at run time)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


_BLAS: list = []  # a threadpoolctl controller, made on first use


@contextlib.contextmanager
def _blas_yields_a_core():
    """NumPy's BLAS on one thread while a compile runs beside it. A BLAS pool whose threads
    wait on a sibling the compile has descheduled slows each matmul the interpreter runs
    meanwhile ~10x on a 2-core machine (per-example gradients: 2.5 ms became 20-40 ms)."""
    try:
        from threadpoolctl import ThreadpoolController  # noqa: PLC0415 - optional, in [max]
    except ImportError:
        yield
        return
    if not _BLAS:
        _BLAS.append(ThreadpoolController())
    limiter = _BLAS[0].limit(limits=1, user_api="blas")
    try:
        yield
    finally:
        limiter.restore_original_limits()


def _compile_in_child(program, devices, debug) -> Executable:
    """Compile ``program`` in a worker process (``worker.py``) that stores the model in the
    disk cache, then load it from there. A program that cannot be handed over that way (no
    usable disk cache, no content digest, kwargs that do not pickle) compiles here."""
    digest = cache.program_digest(program, _accelerator_tag(devices))
    if digest is None or DISK.directory() is None:
        return _in_process(make, program, devices, debug)
    detach = CONFIG.compile_detach
    try:
        job = pickle.dumps(
            Job(program, devices, debug, os.getpid(), detach), protocol=pickle.HIGHEST_PROTOCOL
        )
    except Exception:  # noqa: BLE001 - an object in the kwargs that does not pickle
        return _in_process(make, program, devices, debug)
    if _EXITING.is_set():
        raise RuntimeError("the interpreter is exiting: the background compile was dropped")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        # files, not pipes: a detached child outliving this process must not die writing to
        # them. By default the child stays in this process group (it ends with it, see
        # worker.py); a detached one gets its own session, out of reach of our signals
        proc = subprocess.Popen(
            # -P: not the current directory first on its path, where another checkout's
            # nabla (speaking another job format) may be; our package root comes first
            [sys.executable, "-P", "-m", "nabla.backends.max.worker"],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            env=env,
            start_new_session=detach,
        )
        _CHILDREN[proc.pid] = _Child(proc, detach)
        try:
            with contextlib.suppress(BrokenPipeError):  # a child that died at start
                proc.stdin.write(job)
                proc.stdin.close()
            proc.wait()
        finally:
            _CHILDREN.pop(proc.pid, None)
        out.seek(0)
        err.seek(0)
        reply, text = out.read(), err.read().decode("utf-8", errors="replace")
    if text:
        sys.stderr.write(text)
    try:
        status, value = pickle.loads(reply)
    except Exception:  # noqa: BLE001 - the child died: say how
        if _EXITING.is_set():  # ended by our exit handler: nothing to report
            raise RuntimeError("the background compile ended with the program") from None
        raise RuntimeError(
            f"the MAX compile worker exited with status {proc.returncode} before replying"
            + (f": {text.strip().splitlines()[-1]}" if text.strip() else "")
        ) from None
    if status == "error":
        raise value
    for name, amount in value.items():
        cache.bump(name, amount)
    exe = _in_process(_load_stored, program, devices, digest)
    return exe if exe is not None else _in_process(make, program, devices, debug)


def _load_stored(program, devices, digest) -> Executable | None:
    """The model a worker process stored for ``digest`` (None if it is not there)."""
    with DISK.locked(digest) as directory:
        if directory is None:
            return None
        model = DISK.load(directory, digest, program, _session(devices).load)
    return None if model is None else Executable(model, program, "compile")


def _submit(program, key, devices, debug) -> Future:
    fut: Future = Future()
    with _STATE:
        _INFLIGHT[key] = fut
        if not _WORKER:
            t = threading.Thread(target=_worker, name="nabla-max-compile", daemon=True)
            t.start()
            _WORKER.append(t)
            atexit.register(_finish_at_exit)
    cache.bump("background_compiles")
    _QUEUE.put((program, key, devices, debug, fut))
    return fut


def _finish_at_exit() -> None:
    """Drop queued compiles and end the worker processes still compiling (a detached one,
    ``NABLA_COMPILE_DETACH=1``, is left to finish and cache its model for the next run);
    MAX work of the worker thread itself (a program the disk cache cannot hand over, or
    loading a finished model) is waited for (see the module docstring)."""
    _EXITING.set()
    while True:
        try:
            program, key, _, _, fut = _QUEUE.get_nowait()
        except queue.Empty:
            break
        fut.cancel()
        with _STATE:
            _INFLIGHT.pop(key, None)
    _end_children()
    if not _IN_PROCESS.is_set():
        return
    with _STATE:
        running = [f for f in _INFLIGHT.values() if not f.done()]
    if running:
        print(
            "nabla: finishing a background MAX compile before exit (NABLA_BACKGROUND_COMPILE=0 "
            "compiles in the foreground instead)",
            file=sys.stderr,
            flush=True,
        )
    for fut in running:
        try:
            fut.result()
        except BaseException:  # noqa: BLE001 - exiting anyway
            pass


def _end_children() -> None:
    """SIGTERM to every worker process that ends with this one, then wait for them (a
    finished model being written is kept: the worker exits once it is stored)."""
    ending = [c.proc for c in list(_CHILDREN.values()) if not c.detach]
    for proc in ending:
        with contextlib.suppress(OSError):
            proc.terminate()
    deadline = time.monotonic() + _END_WAIT_S
    for proc in ending:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                proc.kill()
        except (OSError, RuntimeError):  # reaped by the compile thread meanwhile
            pass


def compiling() -> bool:
    """True while any background compile of this process is in flight."""
    with _STATE:
        return any(not fut.done() for fut in _INFLIGHT.values())


def pending_compile(program) -> Future | None:
    """The background compile of ``program`` still in flight, if any."""
    with _STATE:
        return _INFLIGHT.get(ident(program))


def _remember_unsupported(key, err) -> None:
    if key not in _UNSUPPORTED:
        _UNSUPPORTED[key] = err
        cache.bump("unsupported_programs")


def ready(program, background: bool, debug: bool) -> bool:
    """The ``auto`` policy's question: is a compiled model ready? Starts making one if not."""
    if "max" in program.executables:
        return True
    key = ident(program)
    if key in _UNSUPPORTED:
        return False
    exe = MEMORY.get(key)
    if exe is not None:
        cache.bump("memory_hits")
        program.executables["max"] = exe
        return True
    with _STATE:
        fut = _INFLIGHT.get(key)
    if fut is not None:
        if not fut.done():
            return False
        err = fut.exception()
        if err is not None:
            _remember_unsupported(key, err)
            LOG.warning("MAX compile failed; this structure stays on NumPy: %s", err)
            return False
        program.executables["max"] = fut.result()
        return True
    try:
        devices = check_program(program)
    except Exception as e:  # noqa: BLE001 - UnsupportedOnMax, or no such accelerator
        _remember_unsupported(key, e)
        if debug:
            debug_log(LOG, "staying on NumPy: %s", e)
        return False
    digest = cache.program_digest(program, _accelerator_tag(devices))
    on_disk = digest is not None and DISK.has(digest)
    if background and not on_disk:
        _submit(program, key, devices, debug)
        return False
    try:
        exe = make(program, devices, debug)
    except Exception as e:  # noqa: BLE001 - auto falls back to NumPy for this structure
        _remember_unsupported(key, e)
        LOG.warning("MAX compile failed; this structure stays on NumPy: %s", e)
        return False
    MEMORY.put(key, exe)
    program.executables["max"] = exe
    return True


def clear_caches() -> None:
    """Forget in-memory executables and unsupported marks (the disk cache stays)."""
    MEMORY.clear()
    _UNSUPPORTED.clear()
