//! Tunnel handles as the Go library hands them out: the lowest free integer ≥ 0.

/// Slots indexed by handle; `None` is free.
pub(crate) struct Handles<T> {
    slots: Vec<Option<T>>,
}

impl<T: Clone> Handles<T> {
    pub(crate) const fn new() -> Self {
        Handles { slots: Vec::new() }
    }

    /// Stores `v` under the lowest free handle; `None` when no `jint` is left.
    pub(crate) fn insert(&mut self, v: T) -> Option<i32> {
        let free = self.slots.iter().position(Option::is_none);
        let i = free.unwrap_or(self.slots.len());
        let h = i32::try_from(i).ok()?;
        if free.is_none() {
            self.slots.push(None);
        }
        self.slots[i] = Some(v);
        Some(h)
    }

    pub(crate) fn get(&self, h: i32) -> Option<T> {
        self.slots.get(usize::try_from(h).ok()?)?.clone()
    }

    /// Frees `h`, returning what it held.
    pub(crate) fn remove(&mut self, h: i32) -> Option<T> {
        let v = self.slots.get_mut(usize::try_from(h).ok()?)?.take();
        while matches!(self.slots.last(), Some(None)) {
            self.slots.pop();
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::Handles;

    #[test]
    fn the_lowest_free_handle_is_handed_out_and_bad_ones_name_nothing() {
        let mut t = Handles::new();
        assert_eq!(
            (t.insert('a'), t.insert('b'), t.insert('c')),
            (Some(0), Some(1), Some(2))
        );
        assert_eq!(t.remove(1), Some('b'));
        assert_eq!(t.insert('d'), Some(1));
        assert_eq!(t.remove(2), Some('c'));
        assert_eq!(t.remove(2), None, "freed once");
        assert_eq!(t.insert('e'), Some(2));
        for h in [-1, i32::MIN, 3, i32::MAX] {
            assert_eq!((t.get(h), t.remove(h)), (None, None), "{h}");
        }
        assert_eq!(t.get(0), Some('a'));
    }
}
