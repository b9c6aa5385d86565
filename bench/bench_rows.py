"""One line per `deltarule bench --json` row: label, shape, rule, median and p10/p90 GPU ms, host
us and GB/s (bench/h200_s27.sh). Usage: python3 bench/bench_rows.py LABEL FILE.jsonl"""
import json
import sys

label, path = sys.argv[1], sys.argv[2]
for line in open(path):
    if not line.startswith("{"):
        continue
    j = json.loads(line)
    print(
        f"{label:<6} {j['shape']:<24} {j['rule']:<26} {j['gpu_ms_median']:.4f} ms "
        f"(p10 {j['gpu_ms_p10']:.4f} p90 {j['gpu_ms_p90']:.4f}) host {j['host_us_median']:.1f} us "
        f"{j.get('gbps', 0) or 0:.0f} GB/s"
    )
