"""Prints one line per `deltarule bench --json` row read from stdin: the median and spread of the
whole-call device times and the state pass's median (bench/h200_s3*.sh). Argument: a prefix."""
import json
import sys

prefix = sys.argv[1] if len(sys.argv) > 1 else ""
for line in sys.stdin:
    if not line.startswith("{"):
        continue
    j = json.loads(line)
    st = j.get("stages_ms", {}).get("prefill state", 0.0)
    print(
        f"{prefix} {j['shape']:<18} {j['backend']:<13} median {j['gpu_ms_median']:.3f} "
        f"p10 {j['gpu_ms_p10']:.3f} p90 {j['gpu_ms_p90']:.3f} max {j['gpu_ms_max']:.3f} state {st:.3f}"
    )
