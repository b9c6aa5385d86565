source bench/h200_env.sh
B=.dev/bin/deltarule
for v in auto 30 60 100; do
  for s in gdn-16/32-1x8192 gdn-16/32-1x32768; do
    DELTARULE_CUDA_OVERLAP_TRACE=1 DELTARULE_CUDA_OVERLAP=$v timeout 60 $B bench --backend cuda --shape $s --iters 3 2>&1 | grep "overlap trace" | tail -1 | sed "s|^|$v $s |"
  done
done
