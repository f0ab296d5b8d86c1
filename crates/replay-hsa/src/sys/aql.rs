//! AQL packet headers (SPEC §9.1): the header's bit fields, and the headers the replay window
//! writes. Bits only: the packets themselves and the queues they go to are
//! [`crate::queue`]'s.

use crate::sys;

/// The packet type (the header's low byte).
pub fn packet_type(header: u16) -> u16 {
    header & ((1 << sys::HSA_PACKET_HEADER_WIDTH_TYPE) - 1)
}

/// Whether the barrier bit is set.
pub fn barrier(header: u16) -> bool {
    header & (1 << sys::HSA_PACKET_HEADER_BARRIER) != 0
}

/// The acquire fence scope.
pub fn acquire_scope(header: u16) -> u16 {
    (header >> sys::HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) & 0b11
}

/// The release fence scope.
pub fn release_scope(header: u16) -> u16 {
    (header >> sys::HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE) & 0b11
}

/// A header from its fields.
pub fn header(packet_type: u16, barrier: bool, acquire: u16, release: u16) -> u16 {
    (packet_type & 0xff)
        | (u16::from(barrier) << sys::HSA_PACKET_HEADER_BARRIER)
        | ((acquire & 0b11) << sys::HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE)
        | ((release & 0b11) << sys::HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE)
}

/// The header of a replay pass: the original's type and barrier bit with system-scope acquire
/// and release fences, so no stale or dirty cache line survives a restore by the copy engine.
pub fn replay_pass_header(original: u16) -> u16 {
    header(
        packet_type(original),
        barrier(original),
        sys::HSA_FENCE_SCOPE_SYSTEM,
        sys::HSA_FENCE_SCOPE_SYSTEM,
    )
}

/// Whether a submission of `headers` (one per packet) is exactly one kernel dispatch, the
/// only kind the window replays (SPEC §6 step 1).
pub fn is_single_dispatch(headers: &[u16]) -> bool {
    matches!(headers, [h] if packet_type(*h) == sys::HSA_PACKET_TYPE_KERNEL_DISPATCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_are_64_bytes() {
        assert_eq!(std::mem::size_of::<sys::hsa_kernel_dispatch_packet_t>(), 64);
        assert_eq!(std::mem::size_of::<sys::hsa_barrier_and_packet_t>(), 64);
    }

    #[test]
    fn headers_round_trip_and_passes_use_system_scope() {
        let h = header(sys::HSA_PACKET_TYPE_KERNEL_DISPATCH, true, 1, 0);
        assert_eq!(h, 2 | 1 << 8 | 1 << 9);
        assert_eq!(packet_type(h), 2);
        assert!(barrier(h));
        assert_eq!((acquire_scope(h), release_scope(h)), (1, 0));
        let p = replay_pass_header(h);
        assert_eq!(packet_type(p), 2);
        assert!(barrier(p));
        assert_eq!((acquire_scope(p), release_scope(p)), (2, 2));
        assert!(is_single_dispatch(&[h]));
        assert!(!is_single_dispatch(&[h, h]));
        assert!(!is_single_dispatch(&[header(3, false, 0, 0)]));
        assert!(!is_single_dispatch(&[]));
    }
}
