//! Benches live in `benches/`; `deltarule bench` times the GPU backends with device timers.
