//! Each loaded module has its own code object, so an unload forgets only its own memos.

use replay_core::AgentId;
use replay_cuda::{intercept, state, sys};

use crate::harness::{alloc_filled, free, function, launch_rmw, setup};

#[test]
fn each_loaded_module_has_its_own_code_object_and_an_unload_forgets_only_its_own() {
    let Some((_g, s)) = setup() else { return };
    let (ma, fa) = function(c"kr_rmw");
    let (mb, fb) = function(c"kr_rmw");
    let a = alloc_filled(15);
    assert_eq!(launch_rmw(fa, a, 1), sys::CUresult::CUDA_SUCCESS);
    assert_eq!(launch_rmw(fb, a, 1), sys::CUresult::CUDA_SUCCESS);
    let tracker = &state::state().tracker;
    let unload = |m: sys::CUmodule| -> u64 {
        let (now, _) = tracker.unloads_since(0);
        // SAFETY: unloads a module loaded above.
        let r = unsafe { intercept::module_unload(m) };
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        let (_, list) = tracker.unloads_since(now);
        let list = list.expect("kept");
        assert_eq!(list.len(), 1, "one agent, one code object: {list:?}");
        assert_eq!(list[0].0, AgentId(0));
        list[0].1
    };
    let ca = unload(ma);
    let cb = unload(mb);
    assert_ne!(ca, 0, "a module the hooks saw is not code object 0");
    assert_ne!(cb, 0);
    assert_ne!(ca, cb, "two modules, two code objects");
    let _ = (fa, fb, &s);
    free(a);
}
