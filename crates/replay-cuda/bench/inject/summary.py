"""The figures of run_h200.sh's folder as Markdown tables (usage: summary.py OUTDIR)."""
import glob
import json
import os
import re
import sys

out = sys.argv[1]
times = {}
for line in open(os.path.join(out, "times.txt")):
    m = re.match(r"(\S+) rc=(\d+) wall_ms=(\d+)", line)
    if m:
        times[m.group(1)] = (int(m.group(2)), int(m.group(3)))


def last(name):
    try:
        return open(os.path.join(out, name + ".stdout")).read().strip().splitlines()[-1]
    except (OSError, IndexError):
        return None


def memory(name):
    try:
        for line in open(os.path.join(out, name + ".stderr")):
            if line.startswith("memory "):
                f = line.split()
                return int(f[2]), int(f[4])
    except OSError:
        pass
    return None


def report(name):
    try:
        return json.load(open(os.path.join(out, name + ".json")))
    except (OSError, ValueError):
        return None


progs = [p for p in ["gemm", "cnn", "transformer", "compiled"] if ("plain_" + p) in times]
print("| program | output = plain (v3/t3/t38) | seen | replayed (N=3) | not replayed, by reason | inputs/outputs differ | cupti: outside wrappers | layout driver/image/extra/unknown | images loaded/read/decompressed/compressed/ptx/unreadable, globals resolved/failed | declined: globals unknown/image unknown, allowed |")
print("|---|---|---|---|---|---|---|---|---|---|")
for p in progs:
    ref = last("plain_" + p)
    same = "/".join("yes" if last(f"{k}_{p}") == ref and ref else "NO" for k in ["verify3", "timing3", "timing38"])
    v = report("verify3_" + p)
    if not v:
        print(f"| {p} | {same} | - | - | - | - | - | - | - | - |")
        continue
    s, i, c = v["summary"], v["interception"], v.get("cupti", {})
    recs = v["records"]
    notr = {}
    for r in recs:
        if r.get("outcome") != "replayed":
            k = f'{r.get("outcome")}:{r.get("reason")}'
            notr[k] = notr.get(k, 0) + 1
    for k in ["stream_capture", "graph_launch", "cooperative", "communication", "other_context", "no_backend", "fallback_launch"]:
        if i.get(k):
            notr[k] = i[k]
    din = sum(1 for r in recs if r.get("inputs_identical") is False)
    dout = sum(1 for r in recs if r.get("outputs_identical") is False)
    cup = c.get("status", "?")
    if cup == "subscribed":
        cup = f'{c.get("outside")} of {c.get("inside", 0) + c.get("outside", 0)} {json.dumps(c.get("outside_by_entry", {}))}'
    print(f'| {p} | {same} | {i["launches_seen"]} | {s.get("replayed")} | {json.dumps(notr) if notr else "none"} | {din}/{dout} | {cup} | {i["layout_driver"]}/{i.get("layout_image", 0)}/{i["layout_extra"]}/{i["layout_unknown"]} | {"/".join(str(i.get(k, 0)) for k in ["images_loaded", "images_read", "images_decompressed", "images_compressed", "images_ptx", "images_unreadable"])}, {i.get("image_globals_resolved", 0)}/{i.get("image_globals_failed", 0)} | {i.get("declined_globals_unknown", 0)}/{i.get("declined_image_unknown", 0)}, {i.get("allowed_globals_unknown", 0)} |')

print()
print("| program | wall plain | verify N=3 | timing N=3 | timing N=38 | added per pass N=3 | added per pass N=38 | captured per dispatch | peak pooled device | host peak RSS: plain / N=38 (+delta) | device in use at end: plain / N=38 (+delta) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")


def added(v):
    if not v:
        return None, None
    s = v["summary"]
    gpu = sum(sum(r.get("pass_gpu_seconds") or []) for r in v["records"])
    passes = sum(r.get("executed_passes") or 0 for r in v["records"])
    n = s.get("dispatches") or 1
    if not passes:
        return None, None
    return (s["replay_seconds"] - gpu) / passes * 1e6, s.get("captured_bytes", 0) / n


for p in progs:
    w = lambda k: f'{times[k][1] / 1000:.1f} s' if k in times else "-"
    a3, _ = added(report("timing3_" + p))
    v38 = report("timing38_" + p)
    a38, cap = added(v38)
    pool = v38["summary"].get("peak_pooled_bytes", 0) / 2**20 if v38 else 0
    m0, m38 = memory("plain_" + p), memory("timing38_" + p)
    rss = f"{m0[0] / 1024:.0f} / {m38[0] / 1024:.0f} MiB (+{(m38[0] - m0[0]) / 1024:.0f})" if m0 and m38 else "-"
    dev = f"{m0[1]} / {m38[1]} MiB (+{m38[1] - m0[1]})" if m0 and m38 else "-"
    f = lambda x: f"{x:.0f} µs" if x is not None else "-"
    capm = f"{cap / 2**20:.0f} MiB" if cap is not None else "-"
    print(f'| {p} | {w("plain_" + p)} | {w("verify3_" + p)} | {w("timing3_" + p)} | {w("timing38_" + p)} | {f(a3)} | {f(a38)} | {capm} | {pool:.0f} MiB | {rss} | {dev} |')

reps = sorted(glob.glob(os.path.join(out, "repeat*_cnn.stdout")))
if reps:
    ref = last("plain_cnn")
    ok = sum(1 for r in reps if open(r).read().strip().splitlines()[-1:] == [ref])
    print(f"\nrepeats of cnn under verify N=3: {ok} of {len(reps)} outputs equal the plain run's")
t = report("timing3_cnn")
if t:
    print("\n`--tool timing --passes 3` on the CNN, per kernel (GPU us per pass min/median/max):")
    for name, row in list(t["kernels"].items())[:12]:
        ps = sorted(row.get("pass_seconds") or [])
        if ps:
            print(f"- {name[:90]}: {ps[0]*1e6:.1f}/{ps[len(ps)//2]*1e6:.1f}/{ps[-1]*1e6:.1f} ({row.get('dispatches')} dispatches)")
