"""One line per `deltarule bench --json` row: label, shape, rule, median and p10/p90 GPU ms, host
us and GB/s (bench/h200_s27.sh). Usage: python3 bench/bench_rows.py LABEL FILE.jsonl

`--faster SHAPE A.jsonl B.jsonl` prints `yes` when A's rows of SHAPE have a lower median GPU time
(the median over A's rows of the shape, e.g. several rounds) than B's, else `no` with the two
times, or `no (no rows ...)` when either file lacks the shape (bench/h200_s27b.sh)."""
import json
import statistics
import sys


def rows(path):
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return []
    return [json.loads(line) for line in lines if line.startswith("{")]


def main():
    if sys.argv[1] == "--faster":
        shape, a_path, b_path = sys.argv[2:5]
        a = [j["gpu_ms_median"] for j in rows(a_path) if j["shape"] == shape]
        b = [j["gpu_ms_median"] for j in rows(b_path) if j["shape"] == shape]
        if not a or not b:
            print(f"no (no rows of {shape}: {len(a)} in {a_path}, {len(b)} in {b_path})")
        else:
            ma, mb = statistics.median(a), statistics.median(b)
            print("yes" if ma < mb else f"no ({ma:.4f} against {mb:.4f} ms)")
        return

    label, path = sys.argv[1], sys.argv[2]
    for j in rows(path):
        print(
            f"{label:<6} {j['shape']:<24} {j['rule']:<26} {j['gpu_ms_median']:.4f} ms "
            f"(p10 {j['gpu_ms_p10']:.4f} p90 {j['gpu_ms_p90']:.4f}) host {j['host_us_median']:.1f} us "
            f"{j.get('gbps', 0) or 0:.0f} GB/s"
        )


if __name__ == "__main__":
    main()
