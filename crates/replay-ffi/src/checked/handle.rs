//! Opaque handles (SPEC §10): a slot and a generation per handle, and a tag per
//! handle type, so a handle used after destroy, of another type, or made up is an error, never
//! undefined behaviour.

/// Most live handles per table; beyond, `insert` refuses.
pub(crate) const MAX_SLOTS: usize = 1 << 20;

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// Bits of a handle's low word that hold the slot index; the byte above holds the table's tag.
const SLOT_BITS: u32 = 24;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;

/// Values addressed by opaque `u64` handles: slot index in the low 24 bits, the table's tag in
/// the next 8 (0 for contexts; each handle type has its own, so a handle of one type is never
/// taken for another), generation in the high 32. A slot's generation starts at 1 and grows on
/// every removal, so a handle is never 0 and a stale handle never matches a reused slot; a slot
/// whose generation would wrap is retired instead of reused.
#[derive(Debug)]
pub(crate) struct HandleTable<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    live: usize,
    max_slots: usize,
    tag: u8,
}

impl<T> Default for HandleTable<T> {
    fn default() -> Self {
        Self::with_max_slots(MAX_SLOTS)
    }
}

impl<T> HandleTable<T> {
    /// An empty table that holds at most `max_slots` slots.
    pub(crate) fn with_max_slots(max_slots: usize) -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            max_slots: max_slots.min(SLOT_MASK as usize + 1),
            tag: 0,
        }
    }

    /// An empty table whose handles carry `tag`.
    // The simulator's tables (feature `sim`) are the tagged ones.
    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    pub(crate) fn tagged(tag: u8) -> Self {
        Self {
            tag,
            ..Self::default()
        }
    }

    fn encode(&self, slot: u32, generation: u32) -> u64 {
        (u64::from(generation) << 32) | (u64::from(self.tag) << SLOT_BITS) | u64::from(slot)
    }

    /// Slot and generation of a handle of this table; `None` for another table's tag.
    fn decode(&self, handle: u64) -> Option<(usize, u32)> {
        let low = handle & 0xffff_ffff;
        ((low >> SLOT_BITS) as u8 == self.tag)
            .then_some(((low & SLOT_MASK) as usize, (handle >> 32) as u32))
    }

    /// Stores `value`; its handle, or `Err(value)` when the table is full.
    pub(crate) fn insert(&mut self, value: T) -> Result<u64, T> {
        if let Some(slot) = self.free.pop() {
            let s = &mut self.slots[slot as usize];
            debug_assert!(s.value.is_none());
            s.value = Some(value);
            let generation = s.generation;
            self.live += 1;
            return Ok(self.encode(slot, generation));
        }
        if self.slots.len() >= self.max_slots {
            return Err(value);
        }
        let slot = self.slots.len() as u32;
        self.slots.push(Slot {
            generation: 1,
            value: Some(value),
        });
        self.live += 1;
        Ok(self.encode(slot, 1))
    }

    /// The value of a live handle.
    pub(crate) fn get(&self, handle: u64) -> Option<&T> {
        let (slot, generation) = self.decode(handle)?;
        let s = self.slots.get(slot)?;
        (s.generation == generation && generation != 0)
            .then_some(s.value.as_ref())
            .flatten()
    }

    /// Removes a live handle's value; the handle (and every copy of it) becomes stale.
    pub(crate) fn remove(&mut self, handle: u64) -> Option<T> {
        let (slot, generation) = self.decode(handle)?;
        let s = self.slots.get_mut(slot)?;
        if s.generation != generation || generation == 0 {
            return None;
        }
        s.value.as_ref()?;
        Some(self.take_slot(slot))
    }

    /// Takes the value of an occupied slot and makes its handles stale.
    fn take_slot(&mut self, slot: usize) -> T {
        let s = &mut self.slots[slot];
        let value = s.value.take().expect("the slot is occupied");
        self.live -= 1;
        match s.generation.checked_add(1) {
            Some(g) => {
                s.generation = g;
                self.free.push(slot as u32);
            }
            // Retired: no generation is left that no old handle carries.
            None => s.generation = 0,
        }
        value
    }

    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    /// Removes every value for which `pred` holds (their handles become stale) and returns
    /// them.
    pub(crate) fn remove_where(&mut self, mut pred: impl FnMut(&T) -> bool) -> Vec<T> {
        let hit: Vec<usize> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.value.as_ref().is_some_and(&mut pred))
            .map(|(i, _)| i)
            .collect();
        hit.into_iter().map(|i| self.take_slot(i)).collect()
    }

    /// Live values.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_never_zero_and_carry_slot_and_generation() {
        let mut t = HandleTable::default();
        let a = t.insert("a").unwrap();
        let b = t.insert("b").unwrap();
        assert_ne!(a, 0);
        assert_eq!(a & 0xffff_ffff, 0);
        assert_eq!(b & 0xffff_ffff, 1);
        assert_eq!(a >> 32, 1);
        assert_eq!(t.get(a), Some(&"a"));
        assert_eq!(t.get(b), Some(&"b"));
        assert_eq!(t.get(0), None);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_removed_handle_is_stale_even_when_its_slot_is_reused() {
        let mut t = HandleTable::default();
        let a = t.insert(1).unwrap();
        assert_eq!(t.remove(a), Some(1));
        assert_eq!(t.get(a), None);
        assert_eq!(t.remove(a), None, "a second destroy is refused");
        let c = t.insert(2).unwrap();
        assert_eq!(c & 0xffff_ffff, a & 0xffff_ffff, "the slot is reused");
        assert_ne!(c, a, "with a new generation");
        assert_eq!(c >> 32, 2);
        assert_eq!(t.get(a), None, "the old handle stays stale");
        assert_eq!(t.get(c), Some(&2));
    }

    #[test]
    fn made_up_handles_are_refused() {
        let mut t = HandleTable::default();
        let a = t.insert(1).unwrap();
        for h in [
            0,
            u64::MAX,
            a + 1,
            a ^ (1 << 40),
            a & 0xffff_ffff,
            7 << 32 | 9,
        ] {
            assert_eq!(t.get(h), None, "{h:#x}");
            assert_eq!(t.remove(h), None, "{h:#x}");
        }
        assert_eq!(t.get(a), Some(&1));
    }

    #[test]
    fn a_slot_whose_generation_would_wrap_is_retired() {
        let mut t = HandleTable::default();
        let a = t.insert(1).unwrap();
        t.slots[0].generation = u32::MAX;
        let h = t.encode(0, u32::MAX);
        assert_eq!(t.remove(h), Some(1));
        assert_eq!(t.slots[0].generation, 0);
        let b = t.insert(2).unwrap();
        assert_eq!(b & 0xffff_ffff, 1, "a fresh slot, not the retired one");
        assert_eq!(t.get(a), None);
        assert_eq!(t.get(h), None);
        assert_eq!(t.get(0), None, "generation 0 never matches");
    }

    #[test]
    fn a_handle_of_another_table_is_refused() {
        let mut contexts = HandleTable::default();
        let mut sims = HandleTable::tagged(1);
        let c = contexts.insert("context").unwrap();
        let s = sims.insert("sim").unwrap();
        assert_eq!(c & 0xffff_ffff, 0, "context handles keep tag 0");
        assert_eq!((s >> 24) & 0xff, 1);
        assert_eq!(s & 0xff_ffff, c & 0xff_ffff, "same slot and generation");
        assert_eq!(s >> 32, c >> 32);
        assert_eq!(contexts.get(s), None);
        assert_eq!(sims.get(c), None);
        assert_eq!(sims.remove(c), None);
        assert_eq!(sims.get(s), Some(&"sim"));
    }

    #[test]
    fn remove_where_makes_the_removed_handles_stale() {
        let mut t = HandleTable::tagged(3);
        let hs: Vec<u64> = (0..5).map(|i| t.insert(i).unwrap()).collect();
        let mut gone = t.remove_where(|v| v % 2 == 0);
        gone.sort_unstable();
        assert_eq!(gone, vec![0, 2, 4]);
        assert_eq!(t.len(), 2);
        for (i, h) in hs.iter().enumerate() {
            assert_eq!(t.get(*h).is_some(), i % 2 == 1, "{i}");
        }
        let again = t.insert(9).unwrap();
        assert!(!hs.contains(&again), "a reused slot has a new generation");
    }

    #[test]
    fn a_full_table_refuses_until_a_slot_is_freed() {
        let mut t = HandleTable::with_max_slots(2);
        let a = t.insert(1).unwrap();
        let _b = t.insert(2).unwrap();
        assert_eq!(t.insert(3), Err(3));
        assert_eq!(t.remove(a), Some(1));
        let c = t.insert(3).unwrap();
        assert_ne!(c, a);
        assert_eq!(t.len(), 2);
    }
}
