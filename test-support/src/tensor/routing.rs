//! Uneven all_to_all data: a mixture-of-experts style routing of tokens,
//! where rank `src` sends rank `dst` some tokens (none for some pairs) of
//! `hidden` elements each, every element a value of its own, so a
//! receiver can check each element came from the right rank, token and
//! place.

use super::Elem;

/// One routing: which tokens go where (`seed`), and each token's elements.
#[derive(Clone, Copy, Debug)]
pub struct Routing {
    /// Picks how many tokens each pair of ranks exchanges.
    pub seed: usize,
    /// Elements per token.
    pub hidden: usize,
}

impl Routing {
    /// The tokens rank `src` routes to rank `dst`: 0 to 4, uneven across
    /// pairs, the same on every rank.
    pub fn tokens(self, src: usize, dst: usize) -> usize {
        (self.seed + 2 * src + 3 * dst + src * dst) % 5
    }

    /// Elements rank `src` sends each rank (its `input_split_sizes`).
    pub fn send_counts(self, src: usize, world: usize) -> Vec<usize> {
        (0..world)
            .map(|dst| self.tokens(src, dst) * self.hidden)
            .collect()
    }

    /// Elements rank `dst` receives from each rank (its `output_split_sizes`).
    pub fn recv_counts(self, dst: usize, world: usize) -> Vec<usize> {
        (0..world)
            .map(|src| self.tokens(src, dst) * self.hidden)
            .collect()
    }

    /// The block rank `src` sends rank `dst`: element `e` of token `t` is
    /// `((src * 64 + dst) * 8 + t) * hidden + e` (exact in `f32` while
    /// that stays below 2^24, in the integer types far beyond).
    pub fn block<T: Elem>(self, src: usize, dst: usize) -> Vec<T> {
        let tokens = self.tokens(src, dst);
        (0..tokens * self.hidden)
            .map(|i| {
                let (t, e) = (i / self.hidden, i % self.hidden);
                T::from_f64((((src * 64 + dst) * 8 + t) * self.hidden + e) as f64)
            })
            .collect()
    }

    /// Rank `src`'s input: its blocks for every rank, in rank order.
    pub fn input<T: Elem>(self, src: usize, world: usize) -> Vec<T> {
        (0..world).flat_map(|dst| self.block(src, dst)).collect()
    }

    /// What rank `dst` receives: every rank's block for it, in rank order.
    pub fn output<T: Elem>(self, dst: usize, world: usize) -> Vec<T> {
        (0..world).flat_map(|src| self.block(src, dst)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_receives_what_the_others_send_it() {
        let routing = Routing { seed: 3, hidden: 2 };
        let world = 4;
        let sent: usize = (0..world)
            .map(|src| routing.send_counts(src, world).iter().sum::<usize>())
            .sum();
        let received: usize = (0..world)
            .map(|dst| routing.recv_counts(dst, world).iter().sum::<usize>())
            .sum();
        assert_eq!(sent, received);
        assert!(
            (0..world).any(|src| routing.send_counts(src, world).contains(&0)),
            "some pairs exchange nothing"
        );
        let output: Vec<i64> = routing.output(2, world);
        assert_eq!(
            output.len(),
            routing.recv_counts(2, world).iter().sum::<usize>()
        );
        let block: Vec<i64> = routing.block(1, 2);
        assert_eq!(block.first(), Some(&(((64 + 2) * 8) * 2)));
    }
}
