// intra_workspace_f32.wgsl: the last prelude of the `chunked` kernel's intra stages (after
// intra.wgsl): no f16 workspace, so W, kdec, qdec and P go to wsa in f32 and the stage binds 8
// storage buffers. The f16 hooks of intra.wgsl decline every store (return false).

fn set_base16(slot: u32) {}

fn put_kdec16(m: u32, d0: u32, kd: vec4<f32>) -> bool {
    return false;
}

fn store_w16(g: u32, cq: u32, c0: u32, b: Blk, l: u32) -> bool {
    return false;
}

fn store_qd16_tile(tid: u32, c0: u32) -> bool {
    return false;
}

fn put_p16(i: u32, j: u32, pv: f32) -> bool {
    return false;
}

// solve_t (intra.wgsl) leaves the packed triangular Tᵀ in s_x: step 4 of the f32 stages reads it.
const PACK_T: bool = true;

// kda's step 4 on cooperative matrices is kda_intra_coop.wgsl's; here the stage runs its f32
// stream.
const KDA_STEP4_COOP: bool = false;

fn kda_step4_coop(tid: u32, t0: u32, l: u32, h: u32, hv: u32, base_gam: u32, base_u: u32,
    x0: Src4, g0: Src4, gl0: vec4<f32>) {}
