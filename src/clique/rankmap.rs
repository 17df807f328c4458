//! Which host each rank of a communicator is on, learned from the setup records: hosts in the
//! order of their lowest rank, a host's ranks in rank order (their local index). Hosts need not
//! be contiguous in rank order. Every rank computes the same map from the same records.

/// The ranks of a communicator, grouped by host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankMap {
    /// The ranks of each host, in rank order.
    hosts: Vec<Vec<usize>>,
}

impl RankMap {
    /// The map of ranks whose host ids are `host_ids` (in rank order).
    pub fn of(host_ids: &[u64]) -> RankMap {
        let mut ids: Vec<u64> = Vec::new();
        let mut hosts: Vec<Vec<usize>> = Vec::new();
        for (rank, id) in host_ids.iter().enumerate() {
            match ids.iter().position(|i| i == id) {
                Some(h) => hosts[h].push(rank),
                None => {
                    ids.push(*id);
                    hosts.push(vec![rank]);
                }
            }
        }
        RankMap { hosts }
    }

    /// Number of hosts.
    pub fn hosts(&self) -> usize {
        self.hosts.len()
    }

    /// Ranks per host when every host has the same number (`None` otherwise).
    pub fn uniform(&self) -> Option<usize> {
        let l = self.hosts.first()?.len();
        self.hosts.iter().all(|h| h.len() == l).then_some(l)
    }

    /// The step between consecutive ranks of a host where it is the same on every host (1 with
    /// one rank per host): hosts contiguous in rank order (1) or dealt round-robin (the host
    /// count). A ReduceScatter across hosts reads a host's blocks this far apart.
    pub fn step(&self) -> Option<usize> {
        let first = self.hosts.first()?;
        let step = if first.len() > 1 { first[1] - first[0] } else { 1 };
        let even = |h: &Vec<usize>| h.iter().enumerate().all(|(l, &r)| r == h[0] + l * step);
        self.hosts.iter().all(even).then_some(step)
    }

    /// `rank`'s host index and local index.
    pub fn place(&self, rank: usize) -> (usize, usize) {
        for (h, ranks) in self.hosts.iter().enumerate() {
            if let Some(l) = ranks.iter().position(|&r| r == rank) {
                return (h, l);
            }
        }
        panic!("rank {rank} is not in the map");
    }

    /// The ranks of host `h`, by local index.
    pub fn host(&self, h: usize) -> &[usize] {
        &self.hosts[h]
    }

    /// Ranks per host, host by host (for messages).
    pub fn sizes(&self) -> Vec<usize> {
        self.hosts.iter().map(Vec::len).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_in_order_of_their_lowest_rank_even_interleaved() {
        let m = RankMap::of(&[9, 4, 9, 4, 7, 7]);
        assert_eq!(m.hosts(), 3);
        assert_eq!((m.host(0), m.host(1), m.host(2)), (&[0, 2][..], &[1, 3][..], &[4, 5][..]));
        assert_eq!(m.uniform(), Some(2));
        assert_eq!([m.place(0), m.place(3), m.place(5)], [(0, 0), (1, 1), (2, 1)]);
        let uneven = RankMap::of(&[1, 1, 2]);
        assert_eq!((uneven.uniform(), uneven.sizes()), (None, vec![2, 1]));
        let one = RankMap::of(&[5; 4]);
        assert_eq!((one.hosts(), one.uniform()), (1, Some(4)));
        assert_eq!((one.step(), m.step(), uneven.step()), (Some(1), None, Some(1)));
        assert_eq!(RankMap::of(&[3, 3, 1, 1]).step(), Some(1));
        assert_eq!(RankMap::of(&[3, 1, 2, 3, 1, 2]).step(), Some(3));
        assert_eq!(RankMap::of(&[3, 1, 1, 3]).step(), None);
        assert_eq!(RankMap::of(&[3, 1, 2]).step(), Some(1));
    }
}
