//! The CPU backend's compute phase: a blocked f32 matmul, C = A·B, on matrices filled once at
//! open.

/// Tile edge of the blocked matmul: three 64×64 f32 tiles are 48 KiB, about an L1 plus a bit of
/// L2 on current cores.
const TILE: usize = 64;

/// C = A·B, all `dim`×`dim`, row-major, A and B fixed at open.
pub(super) struct Matmul {
    dim: usize,
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl Matmul {
    pub(super) fn new(dim: usize, seed: u64) -> Matmul {
        // xorshift64*: values in [-1, 1), far from subnormals, different per rank.
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let bits = state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
            bits as f32 / (1u64 << 23) as f32 - 1.0
        };
        let a = (0..dim * dim).map(|_| next()).collect();
        let b = (0..dim * dim).map(|_| next()).collect();
        Matmul { dim, a, b, c: vec![0.0; dim * dim] }
    }

    pub(super) fn run(&mut self) {
        matmul_blocked(&self.a, &self.b, &mut self.c, self.dim);
    }
}

/// C = A·B for `n`×`n` row-major matrices, in `TILE`×`TILE` blocks so each block of B is reused
/// from cache; the innermost loop runs along contiguous rows of B and C, which the compiler
/// vectorises.
fn matmul_blocked(a: &[f32], b: &[f32], c: &mut [f32], n: usize) {
    c.fill(0.0);
    if n == 0 {
        return;
    }
    for i0 in (0..n).step_by(TILE) {
        for k0 in (0..n).step_by(TILE) {
            for j0 in (0..n).step_by(TILE) {
                let j1 = (j0 + TILE).min(n);
                // Rows i0..i0 + TILE of A and C, columns j0..j1 of C and B, rows k0..k0 + TILE of B.
                for (a_row, c_row) in a.chunks_exact(n).zip(c.chunks_exact_mut(n)).skip(i0).take(TILE) {
                    let c_tile = c_row.get_mut(j0..j1).unwrap_or_default();
                    for (a_ik, b_row) in a_row.iter().zip(b.chunks_exact(n)).skip(k0).take(TILE) {
                        for (c_ij, b_kj) in c_tile.iter_mut().zip(b_row.get(j0..j1).unwrap_or_default()) {
                            *c_ij += a_ik * b_kj;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_blocked_matmul_equals_the_naive_one() {
        for n in [1, 7, 64, 70] {
            let m = Matmul::new(n, 3);
            let mut c = vec![f32::NAN; n * n];
            matmul_blocked(&m.a, &m.b, &mut c, n);
            for i in 0..n {
                for j in 0..n {
                    let naive: f32 = (0..n).map(|k| m.a[i * n + k] * m.b[k * n + j]).sum();
                    assert!((c[i * n + j] - naive).abs() <= 1e-4 * (1.0 + naive.abs()), "n {n}, ({i}, {j})");
                }
            }
        }
    }
}
