//! The handle table: C callers name a tunnel by a small non-negative integer, and the first
//! free one is reused (as WireGuardKit and libwg-go do).

/// Slots indexed by handle; `None` is a free slot.
pub(crate) struct Handles<T> {
    slots: Vec<Option<T>>,
}

impl<T: Clone> Handles<T> {
    /// An empty table.
    pub(crate) const fn new() -> Self {
        Handles { slots: Vec::new() }
    }

    /// Stores `v` in the lowest free slot; `None` when every `i32` handle is taken.
    pub(crate) fn insert(&mut self, v: T) -> Option<i32> {
        let i = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let h = i32::try_from(i).ok()?;
        self.slots[i] = Some(v);
        Some(h)
    }

    /// The value behind `h`, if `h` names a live slot.
    pub(crate) fn get(&self, h: i32) -> Option<T> {
        let i = usize::try_from(h).ok()?;
        self.slots.get(i)?.clone()
    }

    /// Frees `h` and returns its value.
    pub(crate) fn remove(&mut self, h: i32) -> Option<T> {
        let i = usize::try_from(h).ok()?;
        let v = self.slots.get_mut(i)?.take();
        while self.slots.last().is_some_and(Option::is_none) {
            self.slots.pop();
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_start_at_zero_and_reuse_the_first_free_slot() {
        let mut t = Handles::new();
        assert_eq!(t.insert("a"), Some(0));
        assert_eq!(t.insert("b"), Some(1));
        assert_eq!(t.insert("c"), Some(2));
        assert_eq!(t.remove(1), Some("b"));
        assert_eq!(t.remove(0), Some("a"));
        assert_eq!(t.insert("d"), Some(0));
        assert_eq!(t.insert("e"), Some(1));
        assert_eq!(t.insert("f"), Some(3));
        assert_eq!(t.get(2), Some("c"));
    }

    #[test]
    fn invalid_handles_name_nothing() {
        let mut t = Handles::new();
        assert_eq!(t.insert(1u8), Some(0));
        for h in [-1, i32::MIN, 1, 1 << 20, i32::MAX] {
            assert_eq!(t.get(h), None, "{h}");
            assert_eq!(t.remove(h), None, "{h}");
        }
        assert_eq!(t.remove(0), Some(1));
        assert_eq!(t.remove(0), None, "a handle is freed once");
        assert_eq!(t.get(0), None);
    }

    #[test]
    fn removing_the_last_slots_shrinks_the_table() {
        let mut t = Handles::new();
        for v in 0..4 {
            t.insert(v);
        }
        t.remove(1);
        t.remove(3);
        t.remove(2);
        assert_eq!(t.slots.len(), 1);
        assert_eq!(t.insert(9), Some(1));
    }
}
