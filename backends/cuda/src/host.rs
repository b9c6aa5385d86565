//! The host-in/host-out [`Backend`] implementation: uploads the inputs, poisons the outputs with
//! NaN, launches on the backend's own stream and downloads ([`Backend::run`]), or times the
//! launches with CUDA events over rotating input sets ([`Backend::bench`]).

use crate::device::{drv, DeviceBuffer};
use crate::launch::DevicePtrs;
use crate::CudaBackend;
use cudarc::driver::{result, sys};
use deltarule_core::{
    validate_inputs, Backend, BackendKind, BenchOptions, BenchReport, Capabilities, DType,
    FinalState, HostTensor, Inputs, Kernel, Outputs, Problem, Result,
};
use std::time::Instant;

/// Device buffers of one host-side call.
struct CallBuffers {
    _inputs: Vec<DeviceBuffer>,
    o: DeviceBuffer,
    final_state: Option<DeviceBuffer>,
    checkpoints: Option<DeviceBuffer>,
    ptrs: DevicePtrs,
}

impl CudaBackend {
    fn upload(&self, t: &HostTensor) -> Result<DeviceBuffer> {
        let bytes = t.to_le_bytes();
        let buf = DeviceBuffer::alloc(&self.ctx, bytes.len())?;
        if !bytes.is_empty() {
            // SAFETY: `buf` holds at least `bytes.len()` bytes; a pageable source is staged
            // before the call returns, so `bytes` may be dropped afterwards.
            unsafe { result::memcpy_htod_async(buf.ptr(), &bytes, self.stream.cu_stream()) }
                .map_err(|e| drv("upload", e))?;
        }
        Ok(buf)
    }

    fn poisoned(&self, bytes: usize) -> Result<DeviceBuffer> {
        let buf = DeviceBuffer::alloc(&self.ctx, bytes)?;
        // SAFETY: fills the allocation with 0xFF bytes (NaN in f32, bf16 and f16).
        unsafe { result::memset_d8_async(buf.ptr(), 0xff, buf.bytes(), self.stream.cu_stream()) }
            .map_err(|e| drv("poison", e))?;
        Ok(buf)
    }

    fn download(&self, buf: &DeviceBuffer, dtype: DType, shape: Vec<usize>) -> Result<HostTensor> {
        let n: usize = shape.iter().product::<usize>() * dtype.size();
        let mut bytes = vec![0u8; n];
        if n > 0 {
            // SAFETY: `buf` holds at least `n` bytes; a pageable destination returns after the
            // copy completed.
            unsafe {
                result::memcpy_dtoh_async(&mut bytes[..], buf.ptr(), self.stream.cu_stream())
            }
            .map_err(|e| drv("download", e))?;
            self.sync()?;
        }
        HostTensor::from_le_bytes(dtype, shape, &bytes)
    }

    fn sync(&self) -> Result<()> {
        self.stream.synchronize().map_err(|e| drv("synchronize", e))
    }

    /// Uploads the inputs of one call and allocates its outputs, poisoned (an in-place pool is
    /// the uploaded initial state itself).
    fn buffers(&self, p: &Problem, inputs: &Inputs, total_ck: usize) -> Result<CallBuffers> {
        let mut keep = Vec::new();
        let mut ptrs = DevicePtrs::default();
        let mut up = |t: &HostTensor| -> Result<u64> {
            let b = self.upload(t)?;
            let ptr = b.ptr();
            keep.push(b);
            Ok(ptr)
        };
        ptrs.q = up(&inputs.q)?;
        ptrs.k = up(&inputs.k)?;
        ptrs.v = up(&inputs.v)?;
        ptrs.g = up(&inputs.g)?;
        ptrs.beta = up(&inputs.beta)?;
        ptrs.cu_seqlens = up(&inputs.cu_seqlens)?;
        if let Some(a) = &inputs.a_log {
            ptrs.a_log = up(a)?;
        }
        if let Some(d) = &inputs.dt_bias {
            ptrs.dt_bias = up(d)?;
        }
        if let Some(i) = &inputs.state_indices {
            ptrs.state_indices = up(i)?;
        }
        let mut pool = None;
        if let Some(s) = &inputs.initial_state {
            if p.final_state == FinalState::InPlace {
                let b = self.upload(s)?;
                ptrs.state_in = b.ptr();
                pool = Some(b);
            } else {
                ptrs.state_in = up(s)?;
            }
        }
        let state_bytes = p.hv * p.k * p.v * p.state_out_dtype.size();
        let o = self.poisoned(p.tokens * p.hv * p.v * p.out_dtype.size())?;
        ptrs.o = o.ptr();
        let final_state = match p.final_state {
            FinalState::None => None,
            FinalState::Dense => Some(self.poisoned(p.seqs * state_bytes)?),
            FinalState::InPlace => pool,
        };
        ptrs.state_out = final_state.as_ref().map_or(0, |b| b.ptr());
        let checkpoints = match p.checkpoint_every {
            Some(_) => Some(self.poisoned(total_ck * state_bytes)?),
            None => None,
        };
        ptrs.checkpoints = checkpoints.as_ref().map_or(0, |b| b.ptr());
        Ok(CallBuffers {
            _inputs: keep,
            o,
            final_state,
            checkpoints,
            ptrs,
        })
    }
}

impl Backend for CudaBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }

    fn caps(&self) -> &Capabilities {
        &self.caps
    }

    fn kernels(&self) -> &'static [Kernel] {
        &[Kernel::Chunked, Kernel::SmallBh, Kernel::Recurrent]
    }

    fn run(&self, kernel: Kernel, p: &Problem, inputs: &Inputs) -> Result<Outputs> {
        let val = validate_inputs(p, inputs)?;
        // (the host knows every length here: the launch plan gets the longest)
        let max_seq = (0..p.seqs).map(|n| val.seq_len(n)).max();
        self.supports(kernel, p)?;
        self.bind()?;
        let bufs = self.buffers(p, inputs, val.total_checkpoints())?;
        {
            let mut ws = self
                .workspace
                .lock()
                .map_err(|_| drv("workspace", "poisoned lock"))?;
            self.grow(&mut ws, kernel, p, max_seq)?;
            self.enqueue(
                kernel,
                p,
                &bufs.ptrs,
                self.stream_handle(),
                &mut ws,
                max_seq,
            )?;
            self.sync()?;
        }
        let o = self.download(&bufs.o, p.out_dtype, p.o_shape())?;
        let final_state = match (&bufs.final_state, p.final_shape()) {
            (Some(b), Some(shape)) => {
                let dt = if p.final_state == FinalState::InPlace {
                    p.state_in_dtype
                } else {
                    p.state_out_dtype
                };
                Some(self.download(b, dt, shape)?)
            }
            _ => None,
        };
        let checkpoints = match &bufs.checkpoints {
            Some(b) => {
                Some(self.download(b, p.state_out_dtype, p.state_shape(val.total_checkpoints()))?)
            }
            None => None,
        };
        Ok(Outputs {
            o,
            final_state,
            checkpoints,
        })
    }

    fn bench(
        &self,
        kernel: Kernel,
        p: &Problem,
        inputs: &Inputs,
        opts: &BenchOptions,
    ) -> Result<BenchReport> {
        let val = validate_inputs(p, inputs)?;
        let max_seq = (0..p.seqs).map(|n| val.seq_len(n)).max();
        self.supports(kernel, p)?;
        self.bind()?;
        let in_bytes: usize = [&inputs.q, &inputs.k, &inputs.v, &inputs.g, &inputs.beta]
            .iter()
            .map(|t| t.size_bytes())
            .sum::<usize>()
            + inputs.initial_state.as_ref().map_or(0, |t| t.size_bytes())
            + p.tokens * p.hv * p.v * p.out_dtype.size();
        let sets = opts.rotate_bytes.div_ceil(in_bytes.max(1)).clamp(1, 64);
        let mut all = Vec::with_capacity(sets);
        for _ in 0..sets {
            all.push(self.buffers(p, inputs, val.total_checkpoints())?);
        }
        let mut ws = self
            .workspace
            .lock()
            .map_err(|_| drv("workspace", "poisoned lock"))?;
        self.grow(&mut ws, kernel, p, max_seq)?;
        let stream = self.stream_handle();
        // every input set at least once before timing (first touches are not measured)
        for i in 0..opts.warmup.max(sets) {
            self.enqueue(kernel, p, &all[i % sets].ptrs, stream, &mut ws, max_seq)?;
        }
        self.sync()?;
        let iters = opts.iters.max(1);
        let mut events = Vec::with_capacity(2 * iters);
        for _ in 0..2 * iters {
            events.push(
                result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                    .map_err(|e| drv("cuEventCreate", e))?,
            );
        }
        let mut host_us = Vec::with_capacity(iters);
        let cs = self.stream.cu_stream();
        for i in 0..iters {
            // SAFETY: the events were created above in this context; the stream is ours.
            unsafe { result::event::record(events[2 * i], cs) }.map_err(|e| drv("record", e))?;
            let t0 = Instant::now();
            self.enqueue(kernel, p, &all[i % sets].ptrs, stream, &mut ws, max_seq)?;
            host_us.push(t0.elapsed().as_secs_f64() * 1e6);
            // SAFETY: as above.
            unsafe { result::event::record(events[2 * i + 1], cs) }
                .map_err(|e| drv("record", e))?;
        }
        self.sync()?;
        let mut device_ms = Vec::with_capacity(iters);
        for i in 0..iters {
            // SAFETY: both events were recorded on the synchronised stream.
            let ms = unsafe { result::event::elapsed(events[2 * i], events[2 * i + 1]) }
                .map_err(|e| drv("cuEventElapsedTime", e))?;
            device_ms.push(ms as f64);
        }
        for e in events {
            // SAFETY: each event is destroyed once, after its last use.
            let _ = unsafe { result::event::destroy(e) };
        }
        Ok(BenchReport {
            device_ms,
            host_us,
            timer: "CUDA events around each launch".into(),
            input_sets: sets,
            device: self.caps.device.clone(),
            stages: Vec::new(),
        })
    }
}
