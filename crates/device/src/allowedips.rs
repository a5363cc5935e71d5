//! The allowed-IPs table: crypto-key routing.
//!
//! Every outbound packet is routed to the peer owning the longest prefix that contains its
//! destination, and every inbound packet is dropped unless the longest prefix containing its
//! *source* belongs to the peer that sent it. Both checks run once per packet, so lookups must be
//! cheap and allocation-free.
//!
//! The table is two path-compressed binary radix tries (IPv4 keyed by `u32`, IPv6 by `u128`),
//! the same shape as the Linux kernel and wireguard-go implementations (reference-behaviour.md
//! §2.12). Nodes live in a per-family arena (`Vec`) and refer to each other by `u32` index, which
//! keeps them small and contiguous (no `unsafe`, no per-node allocation) and lets a freed slot be
//! reused. A node matches an address when `(addr ^ node.key).leading_zeros() >= node.cidr`, so one
//! step of a lookup is an XOR, a leading-zero count and a bit test.
//!
//! Values are not stored in the nodes: each distinct value has one entry in a small slot table,
//! and that entry heads an intrusive doubly linked list (threaded through the nodes of both
//! families) of the value's prefixes in insertion order. This gives `remove_by_value` and
//! `prefixes_of` a cost proportional to the number of distinct values plus that value's own
//! prefixes, never to the whole table — `T` only needs `PartialEq` (a peer handle compares by
//! pointer identity), so the slot is found by a linear scan over the distinct values.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an insert was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowedIpsError {
    /// The prefix length is longer than the address (more than 32 for IPv4, 128 for IPv6).
    CidrOutOfRange {
        /// The prefix length that was asked for.
        cidr: u8,
        /// The address width of the family (32 or 128).
        max: u8,
    },
    /// The arena of one family would exceed the node count an index can address.
    TableFull,
}

impl fmt::Display for AllowedIpsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CidrOutOfRange { cidr, max } => {
                write!(f, "prefix length /{cidr} exceeds the address width /{max}")
            }
            Self::TableFull => f.write_str("allowed-IPs table is full"),
        }
    }
}

impl std::error::Error for AllowedIpsError {}

/// "No node" / "no value": index sentinel.
const NIL: u32 = u32::MAX;
/// Bit of a [`NodeRef`] that marks the IPv6 arena; the rest is the arena index.
const V6_FLAG: u32 = 1 << 31;
/// Largest arena index a [`NodeRef`] can carry (the flag bit and [`NIL`] are reserved).
const MAX_NODES: usize = (V6_FLAG - 1) as usize;

/// An address family's key: the address as a big-endian integer.
trait Key: Copy + Eq + fmt::Debug {
    /// Address width in bits.
    const BITS: u8;
    /// Number of leading bits `self` and `other` share.
    fn common_bits(self, other: Self) -> u32;
    /// The bit at `pos` counted from the most significant bit; `pos < BITS`.
    fn bit(self, pos: u8) -> usize;
    /// `self` with every bit after the first `cidr` cleared; `cidr <= BITS`.
    fn masked(self, cidr: u8) -> Self;
    fn to_ip(self) -> IpAddr;
}

impl Key for u32 {
    const BITS: u8 = 32;
    #[inline(always)]
    fn common_bits(self, other: Self) -> u32 {
        (self ^ other).leading_zeros()
    }
    #[inline(always)]
    fn bit(self, pos: u8) -> usize {
        ((self >> (31 - u32::from(pos))) & 1) as usize
    }
    #[inline]
    fn masked(self, cidr: u8) -> Self {
        // checked_shl: a shift by the full width (cidr == 0) means "keep nothing".
        self & u32::MAX.checked_shl(u32::from(32 - cidr)).unwrap_or(0)
    }
    fn to_ip(self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(self))
    }
}

impl Key for u128 {
    const BITS: u8 = 128;
    #[inline(always)]
    fn common_bits(self, other: Self) -> u32 {
        (self ^ other).leading_zeros()
    }
    #[inline(always)]
    fn bit(self, pos: u8) -> usize {
        ((self >> (127 - u32::from(pos))) & 1) as usize
    }
    #[inline]
    fn masked(self, cidr: u8) -> Self {
        self & u128::MAX.checked_shl(u32::from(128 - cidr)).unwrap_or(0)
    }
    fn to_ip(self) -> IpAddr {
        IpAddr::V6(Ipv6Addr::from(self))
    }
}

/// One trie node. A node with `slot == NIL` is a branching node: it exists only because two
/// prefixes diverge at `cidr`, and therefore always has two children.
#[derive(Debug, Clone)]
struct Node<K> {
    /// Masked prefix bits.
    key: K,
    /// Children by the bit at position `cidr` (none when `cidr == K::BITS`).
    children: [u32; 2],
    /// Value-table slot owning this prefix, or [`NIL`].
    slot: u32,
    /// Parent node index, [`NIL`] for the root.
    parent: u32,
    /// Neighbours in the owning value's insertion-ordered list ([`NodeRef`] encoding).
    prev: u32,
    next: u32,
    cidr: u8,
}

/// One family's trie: an arena of nodes plus a free list of reusable indices.
#[derive(Debug, Clone)]
struct Trie<K> {
    nodes: Vec<Node<K>>,
    free: Vec<u32>,
    root: u32,
}

impl<K: Key> Trie<K> {
    fn new() -> Self {
        Self {
            nodes: Vec::new(),
            free: Vec::new(),
            root: NIL,
        }
    }

    fn clear(&mut self) {
        self.nodes.clear();
        self.free.clear();
        self.root = NIL;
    }

    /// Longest-prefix match: the slot of the most specific valued node containing `addr`.
    #[inline]
    fn lookup(&self, addr: K) -> u32 {
        let mut best = NIL;
        let mut cur = self.root;
        while let Some(node) = self.nodes.get(cur as usize) {
            if addr.common_bits(node.key) < u32::from(node.cidr) {
                break;
            }
            if node.slot != NIL {
                best = node.slot;
            }
            if node.cidr >= K::BITS {
                break;
            }
            cur = node.children[addr.bit(node.cidr)];
        }
        best
    }

    /// The node holding exactly `key/cidr` (masked), if any — valued or not.
    fn find_exact(&self, key: K, cidr: u8) -> Option<u32> {
        let mut cur = self.root;
        while let Some(node) = self.nodes.get(cur as usize) {
            if node.cidr > cidr || key.common_bits(node.key) < u32::from(node.cidr) {
                return None;
            }
            if node.cidr == cidr {
                return Some(cur);
            }
            cur = node.children[key.bit(node.cidr)];
        }
        None
    }

    fn alloc(&mut self, key: K, cidr: u8, slot: u32, parent: u32) -> Result<u32, AllowedIpsError> {
        let node = Node {
            key,
            children: [NIL; 2],
            slot,
            parent,
            prev: NIL,
            next: NIL,
            cidr,
        };
        if let Some(idx) = self.free.pop() {
            if let Some(n) = self.nodes.get_mut(idx as usize) {
                *n = node;
                return Ok(idx);
            }
        }
        if self.nodes.len() >= MAX_NODES {
            return Err(AllowedIpsError::TableFull);
        }
        self.nodes.push(node);
        Ok((self.nodes.len() - 1) as u32)
    }

    fn release(&mut self, idx: u32) {
        if let Some(n) = self.nodes.get_mut(idx as usize) {
            n.slot = NIL;
            n.children = [NIL; 2];
            n.parent = NIL;
            n.prev = NIL;
            n.next = NIL;
            self.free.push(idx);
        }
    }

    /// Points whatever referred to `old` (the root or `parent`'s child link) at `new`.
    fn replace_link(&mut self, parent: u32, old: u32, new: u32) {
        match self.nodes.get_mut(parent as usize) {
            None => self.root = new,
            Some(p) => {
                if p.children[0] == old {
                    p.children[0] = new;
                } else {
                    p.children[1] = new;
                }
            }
        }
        if let Some(n) = self.nodes.get_mut(new as usize) {
            n.parent = parent;
        }
    }

    /// Finds or creates the node for `key/cidr` (`key` already masked). Returns its index; the
    /// caller assigns the slot. A newly created node starts with `slot == NIL`.
    fn insert_node(&mut self, key: K, cidr: u8) -> Result<u32, AllowedIpsError> {
        let mut parent = NIL;
        let mut cur = self.root;
        loop {
            let Some(node) = self.nodes.get(cur as usize) else {
                // Empty link: hang a new leaf here.
                // (`replace_link` cannot be used: it finds the link by its old target, and both
                // links of a leaf parent are NIL.)
                let new = self.alloc(key, cidr, NIL, parent)?;
                match self.nodes.get_mut(parent as usize) {
                    Some(p) => p.children[key.bit(p.cidr)] = new,
                    None => self.root = new,
                }
                return Ok(new);
            };
            let (node_key, node_cidr) = (node.key, node.cidr);
            let common = key
                .common_bits(node_key)
                .min(u32::from(cidr.min(node_cidr))) as u8;
            if common >= node_cidr {
                // The node's prefix contains the new one.
                if node_cidr == cidr {
                    return Ok(cur);
                }
                parent = cur;
                cur = node.children[key.bit(node_cidr)];
                continue;
            }
            // The node does not contain the new prefix: splice the new prefix in above it.
            let new = self.alloc(key, cidr, NIL, parent)?;
            if common == cidr {
                // The new prefix contains the node: the node becomes its child.
                self.replace_link(parent, cur, new);
                if let Some(n) = self.nodes.get_mut(new as usize) {
                    n.children[node_key.bit(cidr)] = cur;
                }
                if let Some(n) = self.nodes.get_mut(cur as usize) {
                    n.parent = new;
                }
            } else {
                // Siblings diverging at bit `common`: join them under a branching node.
                let branch = match self.alloc(key.masked(common), common, NIL, parent) {
                    Ok(b) => b,
                    Err(e) => {
                        self.release(new);
                        return Err(e);
                    }
                };
                self.replace_link(parent, cur, branch);
                if let Some(b) = self.nodes.get_mut(branch as usize) {
                    b.children[node_key.bit(common)] = cur;
                    b.children[key.bit(common)] = new;
                }
                if let Some(n) = self.nodes.get_mut(cur as usize) {
                    n.parent = branch;
                }
                if let Some(n) = self.nodes.get_mut(new as usize) {
                    n.parent = branch;
                }
            }
            return Ok(new);
        }
    }

    /// Takes `idx`'s value away (the caller has already unlinked it from its value list) and
    /// removes the nodes that became redundant: the node itself when it has at most one child,
    /// and then its parent when that is a branching node left with a single child.
    fn remove_node(&mut self, idx: u32) {
        let Some(node) = self.nodes.get_mut(idx as usize) else {
            return;
        };
        node.slot = NIL;
        node.prev = NIL;
        node.next = NIL;
        if node.children[0] != NIL && node.children[1] != NIL {
            return; // Still needed as a branching node.
        }
        let child = if node.children[0] != NIL {
            node.children[0]
        } else {
            node.children[1]
        };
        let parent = node.parent;
        self.replace_link(parent, idx, child);
        self.release(idx);
        if child != NIL {
            return;
        }
        // `idx` was a leaf; a branching parent now has one child and is redundant.
        let Some(p) = self.nodes.get(parent as usize) else {
            return;
        };
        if p.slot != NIL {
            return;
        }
        let sibling = if p.children[0] != NIL {
            p.children[0]
        } else {
            p.children[1]
        };
        let grandparent = p.parent;
        self.replace_link(grandparent, parent, sibling);
        self.release(parent);
    }
}

/// A reference to a node in either arena: the arena index, with [`V6_FLAG`] set for IPv6.
type NodeRef = u32;

/// One distinct value and the ends of its insertion-ordered prefix list.
#[derive(Debug, Clone)]
struct ValueEntry<T> {
    value: T,
    head: NodeRef,
    tail: NodeRef,
}

/// Longest-prefix-match table from IPv4/IPv6 prefixes to values (peers).
#[derive(Debug, Clone)]
pub struct AllowedIps<T> {
    v4: Trie<u32>,
    v6: Trie<u128>,
    /// Distinct values; `None` is a free slot (listed in `free_slots`).
    values: Vec<Option<ValueEntry<T>>>,
    free_slots: Vec<u32>,
    /// Slot used by the last insert: configuration inserts one peer's prefixes in a row, so this
    /// usually saves the linear search.
    last_slot: u32,
    /// Number of valued prefixes.
    len: usize,
}

impl<T: Clone + PartialEq> Default for AllowedIps<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Clone + PartialEq> AllowedIps<T> {
    /// An empty table.
    pub fn new() -> Self {
        Self {
            v4: Trie::new(),
            v6: Trie::new(),
            values: Vec::new(),
            free_slots: Vec::new(),
            last_slot: NIL,
            len: 0,
        }
    }

    /// Inserts `addr/cidr` (masked: 10.1.2.3/8 is stored as 10.0.0.0/8) for `value`; an existing
    /// exact prefix is reassigned (last writer wins) and moves to the end of `value`'s list, as in
    /// wireguard-go. cidr > 32 (v4) / > 128 (v6) -> Err.
    pub fn insert(&mut self, addr: IpAddr, cidr: u8, value: T) -> Result<(), AllowedIpsError> {
        let node = match addr {
            IpAddr::V4(a) => {
                check_cidr::<u32>(cidr)?;
                self.v4.insert_node(u32::from(a).masked(cidr), cidr)?
            }
            IpAddr::V6(a) => {
                check_cidr::<u128>(cidr)?;
                self.v6.insert_node(u128::from(a).masked(cidr), cidr)? | V6_FLAG
            }
        };
        // Unlink before looking the slot up: unlinking may free the old owner's slot, which
        // could be `value`'s own.
        if self.node_slot(node) == NIL {
            self.len += 1;
        } else {
            self.unlink(node);
        }
        let slot = match self.find_slot(&value) {
            Some(s) => s,
            None => self.new_slot(value),
        };
        self.link_back(node, slot);
        self.last_slot = slot;
        Ok(())
    }

    /// Removes `addr/cidr` only if that exact prefix exists and belongs to `value`. Returns
    /// whether removed. (`addr` is masked first, like on insert.)
    pub fn remove(&mut self, addr: IpAddr, cidr: u8, value: &T) -> bool {
        let found = match addr {
            IpAddr::V4(a) if cidr <= u32::BITS as u8 => {
                self.v4.find_exact(u32::from(a).masked(cidr), cidr)
            }
            IpAddr::V6(a) if cidr <= u128::BITS as u8 => self
                .v6
                .find_exact(u128::from(a).masked(cidr), cidr)
                .map(|i| i | V6_FLAG),
            _ => None,
        };
        let Some(node) = found else { return false };
        let slot = self.node_slot(node);
        let owned = matches!(self.entry(slot), Some(e) if e.value == *value);
        if !owned {
            return false;
        }
        self.unlink(node);
        self.remove_trie_node(node);
        self.len -= 1;
        true
    }

    /// Removes every prefix of `value`.
    pub fn remove_by_value(&mut self, value: &T) {
        let Some(slot) = self.find_slot(value) else {
            return;
        };
        let mut cur = self.entry(slot).map_or(NIL, |e| e.head);
        while cur != NIL {
            let next = self.node_links(cur).1;
            self.remove_trie_node(cur);
            self.len -= 1;
            cur = next;
        }
        self.free_slot(slot);
    }

    /// Removes everything.
    pub fn clear(&mut self) {
        self.v4.clear();
        self.v6.clear();
        self.values.clear();
        self.free_slots.clear();
        self.last_slot = NIL;
        self.len = 0;
    }

    /// The value owning the longest prefix that contains `addr`.
    #[inline]
    pub fn lookup(&self, addr: IpAddr) -> Option<&T> {
        match addr {
            IpAddr::V4(a) => self.lookup_v4(a.octets()),
            IpAddr::V6(a) => self.lookup_v6(a.octets()),
        }
    }

    /// Hot-path IPv4 lookup taking the address bytes straight from a packet header.
    #[inline]
    pub fn lookup_v4(&self, addr: [u8; 4]) -> Option<&T> {
        self.value_at(self.v4.lookup(u32::from_be_bytes(addr)))
    }

    /// Hot-path IPv6 lookup taking the address bytes straight from a packet header.
    #[inline]
    pub fn lookup_v6(&self, addr: [u8; 16]) -> Option<&T> {
        self.value_at(self.v6.lookup(u128::from_be_bytes(addr)))
    }

    /// The prefixes of `value` (masked), in insertion order — `wg showconf` prints them that way.
    pub fn prefixes_of(&self, value: &T) -> Vec<(IpAddr, u8)> {
        let mut out = Vec::new();
        let Some(entry) = self.values.iter().flatten().find(|e| e.value == *value) else {
            return out;
        };
        let mut cur = entry.head;
        while cur != NIL {
            let (key, cidr, next) = if cur & V6_FLAG != 0 {
                match self.v6.nodes.get((cur & !V6_FLAG) as usize) {
                    Some(n) => (n.key.to_ip(), n.cidr, n.next),
                    None => break,
                }
            } else {
                match self.v4.nodes.get(cur as usize) {
                    Some(n) => (n.key.to_ip(), n.cidr, n.next),
                    None => break,
                }
            };
            out.push((key, cidr));
            cur = next;
        }
        out
    }

    /// Number of prefixes in the table (both families).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds no prefix.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn value_at(&self, slot: u32) -> Option<&T> {
        match self.values.get(slot as usize) {
            Some(Some(e)) => Some(&e.value),
            _ => None,
        }
    }

    fn entry(&self, slot: u32) -> Option<&ValueEntry<T>> {
        self.values.get(slot as usize).and_then(Option::as_ref)
    }

    fn entry_mut(&mut self, slot: u32) -> Option<&mut ValueEntry<T>> {
        self.values.get_mut(slot as usize).and_then(Option::as_mut)
    }

    fn find_slot(&self, value: &T) -> Option<u32> {
        if matches!(self.entry(self.last_slot), Some(e) if e.value == *value) {
            return Some(self.last_slot);
        }
        self.values
            .iter()
            .position(|e| matches!(e, Some(e) if e.value == *value))
            .map(|i| i as u32)
    }

    fn new_slot(&mut self, value: T) -> u32 {
        let entry = Some(ValueEntry {
            value,
            head: NIL,
            tail: NIL,
        });
        while let Some(s) = self.free_slots.pop() {
            if let Some(free @ None) = self.values.get_mut(s as usize) {
                *free = entry;
                return s;
            }
        }
        self.values.push(entry);
        (self.values.len() - 1) as u32
    }

    fn free_slot(&mut self, slot: u32) {
        if let Some(e @ Some(_)) = self.values.get_mut(slot as usize) {
            *e = None;
            self.free_slots.push(slot);
        }
        if self.last_slot == slot {
            self.last_slot = NIL;
        }
    }

    fn node_slot(&self, node: NodeRef) -> u32 {
        if node & V6_FLAG != 0 {
            self.v6
                .nodes
                .get((node & !V6_FLAG) as usize)
                .map_or(NIL, |n| n.slot)
        } else {
            self.v4.nodes.get(node as usize).map_or(NIL, |n| n.slot)
        }
    }

    /// `(prev, next)` of a node in its value list.
    fn node_links(&self, node: NodeRef) -> (NodeRef, NodeRef) {
        if node & V6_FLAG != 0 {
            self.v6
                .nodes
                .get((node & !V6_FLAG) as usize)
                .map_or((NIL, NIL), |n| (n.prev, n.next))
        } else {
            self.v4
                .nodes
                .get(node as usize)
                .map_or((NIL, NIL), |n| (n.prev, n.next))
        }
    }

    /// Overwrites a node's slot and list links (`None` keeps the current value).
    fn set_node(&mut self, node: NodeRef, slot: Option<u32>, prev: Option<u32>, next: Option<u32>) {
        fn apply<K>(
            n: Option<&mut Node<K>>,
            slot: Option<u32>,
            prev: Option<u32>,
            next: Option<u32>,
        ) {
            if let Some(n) = n {
                n.slot = slot.unwrap_or(n.slot);
                n.prev = prev.unwrap_or(n.prev);
                n.next = next.unwrap_or(n.next);
            }
        }
        if node & V6_FLAG != 0 {
            apply(
                self.v6.nodes.get_mut((node & !V6_FLAG) as usize),
                slot,
                prev,
                next,
            );
        } else {
            apply(self.v4.nodes.get_mut(node as usize), slot, prev, next);
        }
    }

    /// Appends `node` to `slot`'s list and gives it that slot.
    fn link_back(&mut self, node: NodeRef, slot: u32) {
        let Some(entry) = self.entry_mut(slot) else {
            return;
        };
        let tail = entry.tail;
        entry.tail = node;
        if tail == NIL {
            entry.head = node;
        } else {
            self.set_node(tail, None, None, Some(node));
        }
        self.set_node(node, Some(slot), Some(tail), Some(NIL));
    }

    /// Detaches `node` from its value's list; frees the value's slot when the list empties.
    fn unlink(&mut self, node: NodeRef) {
        let slot = self.node_slot(node);
        let (prev, next) = self.node_links(node);
        if prev != NIL {
            self.set_node(prev, None, None, Some(next));
        } else if let Some(e) = self.entry_mut(slot) {
            e.head = next;
        }
        if next != NIL {
            self.set_node(next, None, Some(prev), None);
        } else if let Some(e) = self.entry_mut(slot) {
            e.tail = prev;
        }
        self.set_node(node, Some(NIL), Some(NIL), Some(NIL));
        if matches!(self.entry(slot), Some(e) if e.head == NIL) {
            self.free_slot(slot);
        }
    }

    fn remove_trie_node(&mut self, node: NodeRef) {
        if node & V6_FLAG != 0 {
            self.v6.remove_node(node & !V6_FLAG);
        } else {
            self.v4.remove_node(node);
        }
    }
}

fn check_cidr<K: Key>(cidr: u8) -> Result<(), AllowedIpsError> {
    if cidr > K::BITS {
        return Err(AllowedIpsError::CidrOutOfRange { cidr, max: K::BITS });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::cell::Cell;
    use std::rc::Rc;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    fn v6(a: u32, b: u32, c: u32, d: u32) -> IpAddr {
        let x =
            (u128::from(a) << 96) | (u128::from(b) << 64) | (u128::from(c) << 32) | u128::from(d);
        IpAddr::V6(Ipv6Addr::from(x))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("test literal")
    }

    /// Checks the structural invariants of one trie and returns how many valued nodes it has.
    fn check_trie<K: Key>(t: &Trie<K>, v6_flag: u32, slots: &[Option<u32>]) -> usize {
        let mut reachable = 0;
        let mut valued = 0;
        let mut stack = vec![(t.root, NIL)];
        while let Some((idx, parent)) = stack.pop() {
            if idx == NIL {
                continue;
            }
            let n = &t.nodes[idx as usize];
            reachable += 1;
            assert_eq!(n.parent, parent, "parent back-pointer of node {idx}");
            assert_eq!(n.key, n.key.masked(n.cidr), "node key must be masked");
            assert!(n.cidr <= K::BITS);
            if parent != NIL {
                let p = &t.nodes[parent as usize];
                assert!(
                    n.cidr > p.cidr,
                    "child prefix must be longer than its parent's"
                );
                assert!(
                    n.key.common_bits(p.key) >= u32::from(p.cidr),
                    "child outside parent"
                );
                let side = usize::from(p.children[1] == idx);
                assert_eq!(n.key.bit(p.cidr), side, "child on the wrong side");
            }
            if n.slot == NIL {
                assert!(
                    n.children[0] != NIL && n.children[1] != NIL,
                    "a value-less node must branch (node {idx}, /{})",
                    n.cidr
                );
            } else {
                valued += 1;
                assert!(slots.contains(&Some(n.slot)), "node points at a free slot");
                let _ = v6_flag;
            }
            if n.cidr == K::BITS {
                assert_eq!(n.children, [NIL; 2], "a full-length prefix has no children");
            }
            stack.push((n.children[0], idx));
            stack.push((n.children[1], idx));
        }
        assert_eq!(
            reachable + t.free.len(),
            t.nodes.len(),
            "leaked arena nodes"
        );
        valued
    }

    fn check_invariants<T: Clone + PartialEq>(t: &AllowedIps<T>) {
        let slots: Vec<Option<u32>> = t
            .values
            .iter()
            .enumerate()
            .map(|(i, e)| e.as_ref().map(|_| i as u32))
            .collect();
        let valued = check_trie(&t.v4, 0, &slots) + check_trie(&t.v6, V6_FLAG, &slots);
        assert_eq!(valued, t.len(), "len counter");
        let mut listed = 0;
        for (slot, e) in t.values.iter().enumerate() {
            let Some(e) = e else { continue };
            assert_ne!(e.head, NIL, "a live slot must own at least one prefix");
            let mut prev = NIL;
            let mut cur = e.head;
            while cur != NIL {
                assert_eq!(
                    t.node_slot(cur),
                    slot as u32,
                    "list node owned by another slot"
                );
                let (p, n) = t.node_links(cur);
                assert_eq!(p, prev, "broken prev link");
                prev = cur;
                cur = n;
                listed += 1;
            }
            assert_eq!(e.tail, prev, "tail");
        }
        assert_eq!(listed, t.len(), "every valued node is on exactly one list");
        let live = t.values.iter().flatten().count();
        assert_eq!(
            live + t.free_slots.len(),
            t.values.len(),
            "leaked value slots"
        );
    }

    /// Port of wireguard-go's TestTrieIPv4 (itself from the kernel selftest).
    #[test]
    fn ipv4_overlapping_prefixes() {
        let (a, b, c, d, e, g, h) = ('a', 'b', 'c', 'd', 'e', 'g', 'h');
        let mut t = AllowedIps::new();
        let ins =
            |t: &mut AllowedIps<char>, p, addr, cidr| t.insert(addr, cidr, p).expect("insert");
        ins(&mut t, a, v4(192, 168, 4, 0), 24);
        ins(&mut t, b, v4(192, 168, 4, 4), 32);
        ins(&mut t, c, v4(192, 168, 0, 0), 16);
        ins(&mut t, d, v4(192, 95, 5, 64), 27);
        ins(&mut t, c, v4(192, 95, 5, 65), 27); // same /27 as d: c takes it over
        ins(&mut t, e, v4(0, 0, 0, 0), 0);
        ins(&mut t, g, v4(64, 15, 112, 0), 20);
        ins(&mut t, h, v4(64, 15, 123, 211), 25);
        ins(&mut t, a, v4(10, 0, 0, 0), 25);
        ins(&mut t, b, v4(10, 0, 0, 128), 25);
        ins(&mut t, a, v4(10, 1, 0, 0), 30);
        ins(&mut t, b, v4(10, 1, 0, 4), 30);
        ins(&mut t, c, v4(10, 1, 0, 8), 29);
        ins(&mut t, d, v4(10, 1, 0, 16), 29);
        check_invariants(&t);

        assert_eq!(t.lookup(v4(192, 168, 4, 20)), Some(&a));
        assert_eq!(t.lookup(v4(192, 168, 4, 0)), Some(&a));
        assert_eq!(t.lookup(v4(192, 168, 4, 4)), Some(&b));
        assert_eq!(t.lookup(v4(192, 168, 200, 182)), Some(&c));
        assert_eq!(t.lookup(v4(192, 95, 5, 68)), Some(&c));
        assert_eq!(t.lookup(v4(192, 95, 5, 96)), Some(&e));
        assert_eq!(t.lookup(v4(64, 15, 116, 26)), Some(&g));
        assert_eq!(t.lookup(v4(64, 15, 127, 3)), Some(&g));
        assert_eq!(t.lookup(v4(64, 15, 123, 200)), Some(&h));
        assert_eq!(t.lookup(v4(64, 15, 123, 1)), Some(&g)); // below the /25
        assert_eq!(t.lookup(v4(10, 0, 0, 200)), Some(&b));
        assert_eq!(t.lookup(v4(10, 1, 0, 3)), Some(&a));
        assert_eq!(t.lookup(v4(10, 1, 0, 6)), Some(&b));
        assert_eq!(t.lookup(v4(10, 1, 0, 15)), Some(&c));
        assert_eq!(t.lookup(v4(10, 1, 0, 23)), Some(&d));
        assert_eq!(t.lookup(v4(10, 1, 0, 24)), Some(&e));

        for o in [1, 64, 128, 192, 255] {
            ins(&mut t, a, v4(o, 0, 0, 0), 32);
        }
        for o in [1, 64, 128, 192, 255] {
            assert_eq!(t.lookup_v4([o, 0, 0, 0]), Some(&a));
        }
        t.remove_by_value(&a);
        check_invariants(&t);
        for o in [1, 64, 128, 192, 255] {
            assert_ne!(t.lookup_v4([o, 0, 0, 0]), Some(&a));
        }
        assert!(t.prefixes_of(&a).is_empty());

        for p in [a, b, c, d, e, g, h] {
            t.remove_by_value(&p);
            check_invariants(&t);
        }
        assert!(t.is_empty());
        assert_eq!(t.v4.root, NIL, "removing every peer must empty the trie");
        assert_eq!(t.v6.root, NIL);

        ins(&mut t, a, v4(192, 168, 0, 0), 16);
        ins(&mut t, a, v4(192, 168, 0, 0), 24);
        t.remove_by_value(&a);
        assert_eq!(t.lookup(v4(192, 168, 0, 1)), None);
        assert_eq!(t.v4.root, NIL);
    }

    /// Port of wireguard-go's TestTrieIPv6.
    #[test]
    fn ipv6_overlapping_prefixes() {
        let (a, b, c, d, e, f, g, h) = ('a', 'b', 'c', 'd', 'e', 'f', 'g', 'h');
        let mut t = AllowedIps::new();
        let ins =
            |t: &mut AllowedIps<char>, p, addr, cidr| t.insert(addr, cidr, p).expect("insert");
        ins(&mut t, d, v6(0x26075300, 0x60006b00, 0, 0xc05f0543), 128);
        ins(&mut t, c, v6(0x26075300, 0x60006b00, 0, 0), 64);
        ins(&mut t, e, v6(0, 0, 0, 0), 0);
        ins(&mut t, f, v6(0, 0, 0, 0), 0);
        ins(&mut t, g, v6(0x24046800, 0, 0, 0), 32);
        ins(
            &mut t,
            h,
            v6(0x24046800, 0x40040800, 0xdeadbeef, 0xdeadbeef),
            64,
        );
        ins(
            &mut t,
            a,
            v6(0x24046800, 0x40040800, 0xdeadbeef, 0xdeadbeef),
            128,
        );
        ins(
            &mut t,
            c,
            v6(0x24446800, 0x40e40800, 0xdeaebeef, 0xdefbeef),
            128,
        );
        ins(&mut t, b, v6(0x24446800, 0xf0e40800, 0xeeaebeef, 0), 98);
        check_invariants(&t);

        assert_eq!(
            t.lookup(v6(0x26075300, 0x60006b00, 0, 0xc05f0543)),
            Some(&d)
        );
        assert_eq!(
            t.lookup(v6(0x26075300, 0x60006b00, 0, 0xc02e01ee)),
            Some(&c)
        );
        assert_eq!(t.lookup(v6(0x26075300, 0x60006b01, 0, 0)), Some(&f));
        assert_eq!(t.lookup(v6(0x24046800, 0x40040806, 0, 0x1006)), Some(&g));
        assert_eq!(
            t.lookup(v6(0x24046800, 0x40040806, 0x1234, 0x5678)),
            Some(&g)
        );
        assert_eq!(
            t.lookup(v6(0x240467ff, 0x40040806, 0x1234, 0x5678)),
            Some(&f)
        );
        assert_eq!(
            t.lookup(v6(0x24046801, 0x40040806, 0x1234, 0x5678)),
            Some(&f)
        );
        assert_eq!(
            t.lookup(v6(0x24046800, 0x40040800, 0x1234, 0x5678)),
            Some(&h)
        );
        assert_eq!(t.lookup(v6(0x24046800, 0x40040800, 0, 0)), Some(&h));
        assert_eq!(
            t.lookup(v6(0x24046800, 0x40040800, 0x10101010, 0x10101010)),
            Some(&h)
        );
        assert_eq!(
            t.lookup(v6(0x24046800, 0x40040800, 0xdeadbeef, 0xdeadbeef)),
            Some(&a)
        );
        assert_eq!(
            t.lookup(v6(0x24446800, 0xf0e40800, 0xeeaebeef, 0x1234)),
            Some(&b)
        );
        // The families are separate: the v6 default route does not answer v4 lookups.
        assert_eq!(t.lookup(v4(1, 2, 3, 4)), None);
        // e's only prefix was taken over by f.
        assert!(t.prefixes_of(&e).is_empty());
        assert_eq!(t.len(), 8);
    }

    /// peers.md: an inner source inside a more specific range of another peer must be
    /// attributed to that other peer, so the reverse check rejects it for the wider one.
    #[test]
    fn more_specific_range_of_another_peer_wins_for_source_check() {
        let mut t = AllowedIps::new();
        t.insert(ip("100.64.0.0"), 10, 1u32).expect("insert");
        t.insert(ip("100.64.7.0"), 24, 2u32).expect("insert");
        assert_eq!(t.lookup(ip("100.64.7.9")), Some(&2));
        assert_ne!(t.lookup(ip("100.64.7.9")), Some(&1));
        assert_eq!(t.lookup(ip("100.64.8.9")), Some(&1));
        assert_eq!(t.lookup(ip("100.128.0.1")), None);
    }

    #[test]
    fn insert_masks_the_address() {
        let mut t = AllowedIps::new();
        t.insert(ip("10.1.2.3"), 8, 'a').expect("insert");
        t.insert(ip("fd00:1:2:3:4:5:6:7"), 33, 'a').expect("insert");
        assert_eq!(
            t.prefixes_of(&'a'),
            vec![(ip("10.0.0.0"), 8), (ip("fd00:1::"), 33)]
        );
        assert_eq!(t.lookup(ip("10.200.0.1")), Some(&'a'));
        assert_eq!(t.lookup(ip("fd00:1:7fff::1")), Some(&'a'));
        assert_eq!(t.lookup(ip("fd00:1:8000::1")), None);
        // The same prefix written unmasked differently is the same entry.
        t.insert(ip("10.9.9.9"), 8, 'b').expect("insert");
        assert_eq!(t.len(), 2);
        assert_eq!(t.lookup(ip("10.1.1.1")), Some(&'b'));
        // Removal masks too.
        assert!(t.remove(ip("10.255.0.0"), 8, &'b'));
        assert!(t.remove(ip("fd00:1:7fff::"), 33, &'a'));
        assert!(t.is_empty());
        check_invariants(&t);
    }

    #[test]
    fn last_writer_wins_and_moves_to_the_end() {
        let mut t = AllowedIps::new();
        t.insert(ip("100.64.1.0"), 24, 'a').expect("insert");
        t.insert(ip("100.64.2.0"), 24, 'a').expect("insert");
        t.insert(ip("100.64.1.0"), 24, 'b').expect("insert");
        assert_eq!(t.len(), 2);
        assert_eq!(t.lookup(ip("100.64.1.1")), Some(&'b'));
        assert_eq!(t.prefixes_of(&'a'), vec![(ip("100.64.2.0"), 24)]);
        assert_eq!(t.prefixes_of(&'b'), vec![(ip("100.64.1.0"), 24)]);
        // Taking a peer's last prefix drops the peer from the table.
        t.insert(ip("100.64.2.0"), 24, 'b').expect("insert");
        assert!(t.prefixes_of(&'a').is_empty());
        assert_eq!(t.values.iter().flatten().count(), 1);
        // Re-inserting an owned prefix moves it to the end of the list (wireguard-go order).
        t.insert(ip("100.64.1.0"), 24, 'b').expect("insert");
        assert_eq!(
            t.prefixes_of(&'b'),
            vec![(ip("100.64.2.0"), 24), (ip("100.64.1.0"), 24)]
        );
        // Sole prefix re-inserted by its own peer (its slot is freed and re-made in between).
        let mut u = AllowedIps::new();
        u.insert(ip("fd00::"), 8, 'z').expect("insert");
        u.insert(ip("fd00::"), 8, 'z').expect("insert");
        assert_eq!(u.lookup(ip("fd12::1")), Some(&'z'));
        assert_eq!(u.prefixes_of(&'z'), vec![(ip("fd00::"), 8)]);
        check_invariants(&t);
        check_invariants(&u);
    }

    #[test]
    fn remove_only_when_owned_and_exact() {
        let mut t = AllowedIps::new();
        t.insert(ip("100.64.0.0"), 16, 'a').expect("insert");
        t.insert(ip("100.64.1.0"), 24, 'b').expect("insert");
        assert!(!t.remove(ip("100.64.0.0"), 16, &'b'), "not b's prefix");
        assert!(
            !t.remove(ip("100.64.0.0"), 17, &'a'),
            "no such exact prefix"
        );
        assert!(!t.remove(ip("100.0.0.0"), 8, &'a'), "no such exact prefix");
        assert!(!t.remove(ip("100.64.0.0"), 33, &'a'), "cidr out of range");
        assert!(!t.remove(ip("::"), 0, &'a'), "other family");
        assert_eq!(t.len(), 2);
        assert!(t.remove(ip("100.64.0.0"), 16, &'a'));
        assert!(!t.remove(ip("100.64.0.0"), 16, &'a'), "already gone");
        assert_eq!(t.lookup(ip("100.64.2.1")), None);
        assert_eq!(t.lookup(ip("100.64.1.1")), Some(&'b'));
        check_invariants(&t);
        // A branching node (created for two diverging prefixes) is not removable.
        t.insert(ip("100.64.2.0"), 24, 'b').expect("insert");
        assert!(!t.remove(ip("100.64.0.0"), 22, &'b'));
        assert_eq!(t.len(), 2);
        check_invariants(&t);
    }

    #[test]
    fn remove_by_value_keeps_others() {
        let mut t = AllowedIps::new();
        t.insert(ip("100.64.0.0"), 10, 'a').expect("insert");
        t.insert(ip("100.64.5.0"), 24, 'b').expect("insert");
        t.insert(ip("100.64.5.128"), 25, 'a').expect("insert");
        t.insert(ip("fd00::"), 8, 'a').expect("insert");
        t.insert(ip("fd00::1"), 128, 'b').expect("insert");
        t.remove_by_value(&'a');
        check_invariants(&t);
        assert_eq!(t.len(), 2);
        assert_eq!(t.lookup(ip("100.64.5.200")), Some(&'b'));
        assert_eq!(t.lookup(ip("100.64.6.1")), None);
        assert_eq!(t.lookup(ip("fd00::1")), Some(&'b'));
        assert_eq!(t.lookup(ip("fd00::2")), None);
        t.remove_by_value(&'a'); // absent value: no-op
        t.remove_by_value(&'b');
        assert!(t.is_empty());
        assert_eq!((t.v4.root, t.v6.root), (NIL, NIL));
        check_invariants(&t);
    }

    #[test]
    fn prefixes_of_keeps_insertion_order_across_families() {
        let mut t = AllowedIps::new();
        let order = [
            ("fd00::", 8),
            ("100.64.0.1", 32),
            ("0.0.0.0", 0),
            ("fd00:0:0:1::", 64),
            ("100.64.0.0", 10),
            ("::", 0),
        ];
        for (i, (a, c)) in order.into_iter().enumerate() {
            t.insert(ip(a), c, 7u8).expect("insert");
            // Another peer's prefixes interleaved, in both families.
            t.insert(IpAddr::V4(Ipv4Addr::new(198, 18, i as u8, 0)), 24, 8u8)
                .expect("insert");
            t.insert(
                IpAddr::V6(Ipv6Addr::new(0xfd10, i as u16, 0, 0, 0, 0, 0, 0)),
                32,
                8u8,
            )
            .expect("insert");
        }
        assert_eq!(t.prefixes_of(&8).len(), 2 * order.len());
        assert_eq!(t.prefixes_of(&8)[1], (ip("fd10::"), 32));
        let got = t.prefixes_of(&7);
        let want: Vec<(IpAddr, u8)> = order.iter().map(|&(a, c)| (ip(a), c)).collect();
        assert_eq!(got, want);
        assert!(t.prefixes_of(&9).is_empty());
        check_invariants(&t);
    }

    #[test]
    fn default_routes_for_both_families() {
        let mut t = AllowedIps::new();
        assert_eq!(t.lookup(ip("1.2.3.4")), None);
        t.insert(ip("0.0.0.0"), 0, 'v').expect("insert");
        t.insert(ip("::"), 0, 's').expect("insert");
        t.insert(ip("100.64.0.0"), 10, 'x').expect("insert");
        assert_eq!(t.lookup(ip("1.2.3.4")), Some(&'v'));
        assert_eq!(t.lookup(ip("255.255.255.255")), Some(&'v'));
        assert_eq!(t.lookup(ip("100.100.0.1")), Some(&'x'));
        assert_eq!(t.lookup(ip("2001:db8::1")), Some(&'s'));
        assert_eq!(
            t.lookup(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")),
            Some(&'s')
        );
        assert!(t.remove(ip("0.0.0.0"), 0, &'v'));
        assert_eq!(t.lookup(ip("1.2.3.4")), None);
        assert_eq!(t.lookup(ip("100.100.0.1")), Some(&'x'));
        // A /0 given with host bits is masked to the default route.
        t.insert(ip("9.9.9.9"), 0, 'w').expect("insert");
        assert_eq!(t.prefixes_of(&'w'), vec![(ip("0.0.0.0"), 0)]);
        check_invariants(&t);
    }

    #[test]
    fn cidr_out_of_range_is_an_error() {
        let mut t = AllowedIps::new();
        assert_eq!(
            t.insert(ip("10.0.0.0"), 33, 1u8),
            Err(AllowedIpsError::CidrOutOfRange { cidr: 33, max: 32 })
        );
        assert_eq!(
            t.insert(ip("fd00::"), 129, 1u8),
            Err(AllowedIpsError::CidrOutOfRange {
                cidr: 129,
                max: 128
            })
        );
        assert_eq!(
            t.insert(ip("fd00::"), 255, 1u8),
            Err(AllowedIpsError::CidrOutOfRange {
                cidr: 255,
                max: 128
            })
        );
        assert!(t.is_empty());
        t.insert(ip("10.0.0.1"), 32, 1u8).expect("/32 is valid");
        t.insert(ip("fd00::1"), 128, 1u8).expect("/128 is valid");
        assert_eq!(t.lookup(ip("10.0.0.1")), Some(&1));
        assert_eq!(t.lookup(ip("10.0.0.2")), None);
        assert_eq!(t.lookup(ip("fd00::1")), Some(&1));
        assert_eq!(t.lookup(ip("fd00::2")), None);
        assert!(!AllowedIpsError::CidrOutOfRange { cidr: 33, max: 32 }
            .to_string()
            .is_empty());
    }

    #[test]
    fn clear_empties_and_table_is_reusable() {
        let mut t = AllowedIps::default();
        t.insert(ip("10.0.0.0"), 8, 1u8).expect("insert");
        t.insert(ip("fd00::"), 8, 2u8).expect("insert");
        t.clear();
        assert!(t.is_empty());
        assert_eq!(t.lookup(ip("10.0.0.1")), None);
        assert_eq!(t.lookup(ip("fd00::1")), None);
        assert!(t.prefixes_of(&1).is_empty());
        t.insert(ip("10.0.0.0"), 8, 3u8).expect("insert");
        assert_eq!(t.lookup(ip("10.0.0.1")), Some(&3));
        check_invariants(&t);
    }

    /// A value whose comparisons are counted: the cost measure for `remove_by_value`.
    #[derive(Clone, Debug)]
    struct Counted {
        id: u32,
        compares: Rc<Cell<u64>>,
    }

    impl PartialEq for Counted {
        fn eq(&self, other: &Self) -> bool {
            self.compares.set(self.compares.get() + 1);
            self.id == other.id
        }
    }

    #[test]
    fn remove_by_value_cost_does_not_scale_with_the_table() {
        const PEERS: u32 = 500;
        const PER_PEER: u32 = 20;
        let compares = Rc::new(Cell::new(0));
        let peers: Vec<Counted> = (0..PEERS)
            .map(|id| Counted {
                id,
                compares: compares.clone(),
            })
            .collect();
        let mut t = AllowedIps::new();
        let mut rng = StdRng::seed_from_u64(5);
        for p in &peers {
            for _ in 0..PER_PEER {
                if rng.gen_bool(0.5) {
                    t.insert(
                        IpAddr::V4(rng.gen::<u32>().into()),
                        rng.gen_range(8..=32),
                        p.clone(),
                    )
                } else {
                    t.insert(
                        IpAddr::V6(rng.gen::<u128>().into()),
                        rng.gen_range(16..=128),
                        p.clone(),
                    )
                }
                .expect("insert");
            }
        }
        let total = t.len() as u64;
        assert!(
            total > u64::from(PEERS * PER_PEER) * 9 / 10,
            "random prefixes mostly distinct"
        );
        compares.set(0);
        for p in &peers {
            t.remove_by_value(p);
        }
        assert!(t.is_empty());
        assert_eq!((t.v4.root, t.v6.root), (NIL, NIL));
        check_invariants(&t);
        // A scan of every entry per peer would compare PEERS * total (~5 000 000) times; finding
        // the peer among the distinct values is at most PEERS per call.
        let bound = u64::from(PEERS) * u64::from(PEERS);
        assert!(
            compares.get() <= bound,
            "{} value comparisons for {} removals of {} prefixes (bound {})",
            compares.get(),
            PEERS,
            total,
            bound
        );
        assert!(
            bound < u64::from(PEERS) * total / 10,
            "the bound separates the two costs"
        );
    }

    /// The slow reference router: a list of (family-tagged masked key, cidr, value) in each
    /// value's insertion order; lookup scans for the longest match.
    #[derive(Default)]
    struct Reference {
        entries: Vec<(bool, u128, u8, u8)>,
    }

    impl Reference {
        fn key(addr: IpAddr) -> (bool, u128, u8) {
            match addr {
                IpAddr::V4(a) => (false, u128::from(u32::from(a)), 32),
                IpAddr::V6(a) => (true, u128::from(a), 128),
            }
        }
        fn masked(addr: IpAddr, cidr: u8) -> (bool, u128) {
            let (fam, k, bits) = Self::key(addr);
            let keep = u32::from(cidr);
            let shift = u32::from(bits) - keep;
            let k = if keep == 0 { 0 } else { (k >> shift) << shift };
            (fam, k)
        }
        fn insert(&mut self, addr: IpAddr, cidr: u8, v: u8) {
            let (fam, k) = Self::masked(addr, cidr);
            self.entries
                .retain(|e| !(e.0 == fam && e.1 == k && e.2 == cidr));
            self.entries.push((fam, k, cidr, v));
        }
        fn remove(&mut self, addr: IpAddr, cidr: u8, v: u8) -> bool {
            let (fam, k) = Self::masked(addr, cidr);
            let before = self.entries.len();
            self.entries
                .retain(|e| !(e.0 == fam && e.1 == k && e.2 == cidr && e.3 == v));
            before != self.entries.len()
        }
        fn remove_by_value(&mut self, v: u8) {
            self.entries.retain(|e| e.3 != v);
        }
        fn lookup(&self, addr: IpAddr) -> Option<u8> {
            let mut best: Option<(u8, u8)> = None;
            let family = Self::key(addr).0;
            for &(fam, k, cidr, v) in &self.entries {
                if fam == family
                    && (fam, k) == Self::masked(addr, cidr)
                    && best.is_none_or(|b| cidr >= b.0)
                {
                    best = Some((cidr, v));
                }
            }
            best.map(|b| b.1)
        }
        fn prefixes_of(&self, v: u8) -> Vec<(IpAddr, u8)> {
            self.entries
                .iter()
                .filter(|e| e.3 == v)
                .map(|&(fam, k, cidr, _)| {
                    let a = if fam {
                        IpAddr::V6(Ipv6Addr::from(k))
                    } else {
                        IpAddr::V4(Ipv4Addr::from(k as u32))
                    };
                    (a, cidr)
                })
                .collect()
        }
    }

    /// Random address near one of a few bases, so prefixes overlap, nest and collide.
    fn near(rng: &mut StdRng, bases: &[u128], v6: bool) -> IpAddr {
        let base = bases[rng.gen_range(0..bases.len())];
        let bits = if v6 { 128 } else { 32 };
        let mut x = base;
        for _ in 0..rng.gen_range(0..4) {
            // Flip mostly low bits, sometimes high ones.
            let pos = if rng.gen_bool(0.7) {
                rng.gen_range(0..16)
            } else {
                rng.gen_range(0..bits)
            };
            x ^= 1u128 << pos;
        }
        if v6 {
            IpAddr::V6(Ipv6Addr::from(x))
        } else {
            IpAddr::V4(Ipv4Addr::from(x as u32))
        }
    }

    fn random_cidr(rng: &mut StdRng, v6: bool) -> u8 {
        let max: u8 = if v6 { 128 } else { 32 };
        match rng.gen_range(0..10) {
            0 => rng.gen_range(0..=max / 4),
            1..=3 => max - rng.gen_range(0..=4),
            _ => rng.gen_range(0..=max),
        }
    }

    fn randomized_against_reference(seed: u64, v6_share: f64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let bases4: Vec<u128> = (0..6).map(|_| u128::from(rng.gen::<u32>())).collect();
        let bases6: Vec<u128> = (0..6).map(|_| rng.gen::<u128>()).collect();
        let mut t: AllowedIps<u8> = AllowedIps::new();
        let mut r = Reference::default();
        // Lookups that missed / hit: both must occur often, or the comparison proves little.
        let mut outcomes = [0u32; 2];
        const VALUES: u8 = 12;
        for step in 0..6000 {
            let v6 = rng.gen_bool(v6_share);
            let bases = if v6 { &bases6 } else { &bases4 };
            match rng.gen_range(0..100) {
                0..=49 => {
                    let (a, c, v) = (
                        near(&mut rng, bases, v6),
                        random_cidr(&mut rng, v6),
                        rng.gen_range(0..VALUES),
                    );
                    t.insert(a, c, v).expect("valid cidr");
                    r.insert(a, c, v);
                }
                50..=74 => {
                    // Remove an existing prefix (owner or not) or a random one.
                    let (a, c, v) = match r.entries.get(rng.gen_range(0..r.entries.len().max(1))) {
                        Some(&(fam, k, c, v)) if rng.gen_bool(0.8) => {
                            let a = if fam {
                                IpAddr::V6(Ipv6Addr::from(k))
                            } else {
                                IpAddr::V4(Ipv4Addr::from(k as u32))
                            };
                            let v = if rng.gen_bool(0.7) {
                                v
                            } else {
                                rng.gen_range(0..VALUES)
                            };
                            (a, c, v)
                        }
                        _ => (
                            near(&mut rng, bases, v6),
                            random_cidr(&mut rng, v6),
                            rng.gen_range(0..VALUES),
                        ),
                    };
                    assert_eq!(
                        t.remove(a, c, &v),
                        r.remove(a, c, v),
                        "remove {a}/{c} by {v} at step {step}"
                    );
                }
                75..=76 => {
                    let v = rng.gen_range(0..VALUES);
                    t.remove_by_value(&v);
                    r.remove_by_value(v);
                }
                _ => {
                    for _ in 0..8 {
                        let fam6 = rng.gen_bool(0.5);
                        let a = near(&mut rng, if fam6 { &bases6 } else { &bases4 }, fam6);
                        let want = r.lookup(a);
                        assert_eq!(t.lookup(a).copied(), want, "lookup {a} at step {step}");
                        outcomes[usize::from(want.is_some())] += 1;
                    }
                }
            }
            assert_eq!(t.len(), r.entries.len(), "len at step {step}");
            if step % 97 == 0 {
                check_invariants(&t);
                for v in 0..VALUES {
                    assert_eq!(
                        t.prefixes_of(&v),
                        r.prefixes_of(v),
                        "prefixes_of({v}) at step {step}"
                    );
                }
            }
        }
        check_invariants(&t);
        assert!(
            outcomes.iter().all(|&n| n > 100),
            "lookup outcomes {outcomes:?}"
        );
        assert!(
            r.entries.len() > 50,
            "table stayed too small: {}",
            r.entries.len()
        );
        // Finally every stored prefix's own address and its neighbours agree.
        for &(fam, k, _, _) in &r.entries.clone() {
            for d in [0u128, 1] {
                let a = if fam {
                    IpAddr::V6(Ipv6Addr::from(k ^ d))
                } else {
                    IpAddr::V4(Ipv4Addr::from((k ^ d) as u32))
                };
                assert_eq!(t.lookup(a).copied(), r.lookup(a), "final lookup {a}");
            }
        }
        for v in 0..VALUES {
            t.remove_by_value(&v);
        }
        assert!(t.is_empty());
        check_invariants(&t);
    }

    #[test]
    fn randomized_ipv4_against_reference() {
        randomized_against_reference(1, 0.0);
    }

    #[test]
    fn randomized_ipv6_against_reference() {
        randomized_against_reference(2, 1.0);
    }

    #[test]
    fn randomized_mixed_against_reference() {
        randomized_against_reference(3, 0.5);
    }
}
