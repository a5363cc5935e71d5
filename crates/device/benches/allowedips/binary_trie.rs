//! The hand-written alternative the benchmark measures against: a path-compressed binary radix
//! trie per family, the design of the Linux kernel and wireguard-go, with nodes in a `Vec` arena and per-value intrusive lists. It was the first
//! implementation of `vpn_device::allowedips` and passed the same test suite; it lost on lookup
//! speed to the multibit trie of `prefix-trie` (see docs/design-notes.md). Kept whole so the
//! comparison stays honest; the benchmark only calls the lookups.

#![allow(dead_code)]

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
