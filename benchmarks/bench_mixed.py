"""Two hot programs in one process: does each run as fast as alone, and the same every run?

The programs are two rows of ``bench_peers.py``: per-example gradients of an MLP (64
examples), run on MAX (``--pe-on``; its ``auto`` race goes either way by a few percent on
a quiet 2-core machine), and a Hessian-vector product (n=1000) under ``auto`` (whose race
goes to the interpreter), both ``nb.compile``d. Races are remembered across processes
(``runtime/race_records.py``): the first process to race a program decides for the later
ones, unless ``NABLA_RACE_MEMORY=0``. Each run starts three fresh processes:

- ``alone``: one program only (a process each), warmed and settled (MAX's compile and the
  executor race over), then timed;
- ``mixed``: per-example gradients settled and timed, then the HVP settled and timed after
  it (a script's second program), then the two called alternately, each call timed (a
  training step and an evaluation step in one loop).

Per program it prints the median call of each run, the executor its race chose, the ratio
mixed / alone (target: at most 1.2x) and, over the runs, each time's deviation from the
median of the runs (target: within 20%).

Run: ``python benchmarks/bench_mixed.py [--runs 5] [--backend auto]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from _timing import median_seconds

HERE = os.path.dirname(os.path.abspath(__file__))
CALLS = 300


def _program(make, backend, pin=None):
    """A settled compiled call of workload ``make`` and a function naming its executor;
    ``pin``: the backend its calls run under (None: the process's)."""
    from bench_peers import _settle  # noqa: PLC0415

    import nabla as nb  # noqa: PLC0415 - in the child process only

    _, nabla_fn, _, _ = make()
    fn, args = nabla_fn()
    compiled = nb.compile(fn)

    def call():
        return nb.realize(compiled(*args))

    if pin is not None:
        plain = call

        def call():
            with nb.backend(pin):
                return plain()

        return call, lambda: pin
    _settle(call, backend, compiled)

    def executor():
        plans = [p for p in compiled._cache.values() if hasattr(p, "program")]
        ex = plans[0].program().executables if plans else {}
        race = ex.get("race")
        return race.winner if race is not None else "+".join(k for k in ex if k != "race")

    return call, executor


def _max_available() -> bool:
    from nabla.backends import max_available  # noqa: PLC0415

    return max_available()


def _median_us(call, calls=CALLS, warm=60) -> float:
    return 1e6 * median_seconds(call, calls, warm)


def child(mode: str, backend: str, pe_on: str) -> dict:
    """One process: time the programs of ``mode``; returns what it measured."""
    from bench_peers import hvp, per_example_grads  # noqa: PLC0415

    import nabla as nb  # noqa: PLC0415

    nb.set_backend(backend)
    out = {}
    if mode in ("alone-pe", "mixed"):
        pe, pe_on = _program(per_example_grads, backend, None if pe_on == "auto" else pe_on)
        out["pe"] = _median_us(pe)
    if mode in ("alone-hvp", "mixed"):
        hv, hv_on = _program(hvp, backend)
        out["hvp"] = _median_us(hv)
    if mode == "mixed":
        times = {"pe": [], "hvp": []}
        for _ in range(CALLS):
            for name, call in (("pe", pe), ("hvp", hv)):
                t0 = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - t0)
        out.update({f"{k}_alternating": 1e6 * statistics.median(v) for k, v in times.items()})
    if "pe" in out:
        out["pe_on"] = pe_on()
    if "hvp" in out:
        out["hvp_on"] = hv_on()
    return out


def _run_child(mode: str, backend: str, pe_on: str) -> dict:
    env = dict(os.environ)
    root = os.path.dirname(HERE)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, root, env.get("PYTHONPATH")) if p)
    res = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--backend", backend, "--pe-on", pe_on],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if res.returncode != 0:
        raise RuntimeError(f"{mode} failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--backend", default="auto", choices=["auto", "numpy", "max"])
    ap.add_argument(
        "--pe-on",
        default="max",
        choices=["auto", "numpy", "max"],
        help="the backend the per-example program runs on (default max: the executor of "
        "the two the other does not choose; auto: its own race)",
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.pe_on == "max" and not _max_available():
        args.pe_on = "auto"
    if args.child:
        print(json.dumps(child(args.child, args.backend, args.pe_on)))
        return
    print(
        f"backend={args.backend}, per-example gradients on {args.pe_on}; median us of {CALLS} "
        f"calls per program, per run (load average at start {os.getloadavg()[0]:.1f})"
    )
    rows = []
    for run in range(args.runs):
        alone = {
            **_run_child("alone-pe", args.backend, args.pe_on),
            **_run_child("alone-hvp", args.backend, args.pe_on),
        }
        mixed = _run_child("mixed", args.backend, args.pe_on)
        rows.append((alone, mixed))
        print(
            f"run {run + 1}: per-example alone {alone['pe']:8.1f} ({alone['pe_on']}), "
            f"mixed {mixed['pe']:8.1f} ({mixed['pe_on']}), alternating "
            f"{mixed['pe_alternating']:8.1f} | HVP alone {alone['hvp']:8.1f} "
            f"({alone['hvp_on']}), after per-example {mixed['hvp']:8.1f} ({mixed['hvp_on']}), "
            f"alternating {mixed['hvp_alternating']:8.1f}  [load {os.getloadavg()[0]:.1f}]",
            flush=True,
        )
    print("\nratio to alone (median over runs of each run's ratio; target <= 1.2x):")
    for prog, label in (("pe", "per-example"), ("hvp", "HVP")):
        for kind, key in (("after/before the other", prog), ("alternating", f"{prog}_alternating")):
            ratios = [m[key] / a[prog] for a, m in rows]
            print(
                f"  {label:<12} {kind:<24} {statistics.median(ratios):5.2f}x "
                f"(runs: {', '.join(f'{r:.2f}' for r in ratios)})"
            )
    print("\nspread over runs (each run's time against the median of the runs; target +-20%):")
    for prog, label in (("pe", "per-example"), ("hvp", "HVP")):
        for kind, pick in (
            ("alone", lambda a, m, p=prog: a[p]),
            ("mixed", lambda a, m, p=prog: m[p]),
            ("alternating", lambda a, m, p=prog: m[f"{p}_alternating"]),
        ):
            times = [pick(a, m) for a, m in rows]
            mid = statistics.median(times)
            dev = [100 * (t / mid - 1) for t in times]
            print(
                f"  {label:<12} {kind:<12} median {mid:8.1f} us, "
                f"deviation {min(dev):+5.0f}% .. {max(dev):+5.0f}%"
            )
    chosen = {
        label: sorted({r[i][f"{p}_on"] for r in rows for i in (0, 1)})
        for p, label in (("pe", "per-example"), ("hvp", "HVP"))
    }
    print(f"\nexecutors chosen over all runs: {chosen}")


if __name__ == "__main__":
    main()
