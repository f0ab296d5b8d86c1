//! Per-thread loop state: a stack of frames, one per replay loop running on this thread, each
//! tagged with the registry that owns it, and a count of the overrides they hold (the fast path).

use std::cell::{Cell, RefCell};

use replay_core::ContextId;
use smallvec::SmallVec;

/// One replay loop on this thread.
#[derive(Debug)]
pub(crate) struct Frame {
    /// The registry instance whose window runs the loop.
    pub(crate) registry: u64,
    /// Contexts that were globally active when the loop began.
    pub(crate) began_active: SmallVec<[ContextId; 4]>,
    /// Between `pass_enter_begin` and `pass_enter_end`.
    pub(crate) in_pass_enter: bool,
    /// Local overrides, in the order they were first set.
    overrides: SmallVec<[(ContextId, bool); 4]>,
}

impl Frame {
    pub(crate) fn new(registry: u64, began_active: SmallVec<[ContextId; 4]>) -> Self {
        Self {
            registry,
            began_active,
            in_pass_enter: false,
            overrides: SmallVec::new(),
        }
    }

    pub(crate) fn get(&self, ctx: ContextId) -> Option<bool> {
        self.overrides
            .iter()
            .find_map(|&(c, on)| (c == ctx).then_some(on))
    }

    pub(crate) fn has_overrides(&self) -> bool {
        !self.overrides.is_empty()
    }

    /// Records an override; keeps the thread's count in step.
    pub(crate) fn set(&mut self, ctx: ContextId, on: bool) {
        if let Some(slot) = self.overrides.iter_mut().find(|(c, _)| *c == ctx) {
            slot.1 = on;
        } else {
            self.overrides.push((ctx, on));
            OVERRIDES.with(|n| n.set(n.get() + 1));
        }
    }

    /// Drops the frame's overrides from the thread's count (the frame is going away).
    fn forget(&self) {
        let held = self.overrides.len();
        OVERRIDES.with(|n| n.set(n.get().saturating_sub(held)));
    }
}

thread_local! {
    static FRAMES: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
    static OVERRIDES: Cell<usize> = const { Cell::new(0) };
}

/// The fast path: whether any frame on this thread holds an override, of any registry.
#[inline]
pub(crate) fn any_overrides() -> bool {
    OVERRIDES.try_with(|n| n.get() != 0).unwrap_or(false)
}

/// Runs `f` on the innermost frame of `registry` on this thread (`None` when no loop of it
/// runs here, or when the thread is being torn down).
pub(crate) fn with_frame<R>(registry: u64, f: impl FnOnce(Option<&mut Frame>) -> R) -> R {
    let mut f = Some(f);
    let r = FRAMES.try_with(|frames| {
        let mut frames = frames.borrow_mut();
        let frame = frames.iter_mut().rev().find(|fr| fr.registry == registry);
        (f.take().expect("called once"))(frame)
    });
    match r {
        Ok(r) => r,
        Err(_) => (f.take().expect("not called when the thread-local is gone"))(None),
    }
}

/// Pushes a frame; returns how many frames of the same registry were already on this thread.
pub(crate) fn push(frame: Frame) -> usize {
    FRAMES
        .try_with(|frames| {
            let mut frames = frames.borrow_mut();
            let outer = frames
                .iter()
                .filter(|f| f.registry == frame.registry)
                .count();
            frames.push(frame);
            outer
        })
        .unwrap_or(0)
}

/// Removes the innermost frame of `registry`; `false` when there was none.
pub(crate) fn pop(registry: u64) -> bool {
    FRAMES
        .try_with(|frames| {
            let mut frames = frames.borrow_mut();
            match frames.iter().rposition(|f| f.registry == registry) {
                Some(i) => {
                    frames.remove(i).forget();
                    true
                }
                None => false,
            }
        })
        .unwrap_or(false)
}
