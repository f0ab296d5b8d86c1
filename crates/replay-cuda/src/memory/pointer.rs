//! Pointer queries (SPEC §7.1): what `cuPointerGetAttributes` says about an address the
//! tracker never saw, and its class ([`PointerAttributes::classify`]), for
//! [`replay_core::DeviceMemory::query_pointer`].

use std::ffi::c_void;

use replay_core::{AgentId, MemoryClass, PointerInfo};

use crate::error::CudaResult;
use crate::result::DriverCall;
use crate::sys;

/// What `cuPointerGetAttributes` says about an address (zero where the driver does not say).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PointerAttributes {
    /// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`: 0 (unknown to CUDA), 1 host, 2 device.
    pub memory_type: u32,
    /// `CU_POINTER_ATTRIBUTE_IS_MANAGED`.
    pub is_managed: bool,
    /// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`.
    pub device_ordinal: i32,
    /// `CU_POINTER_ATTRIBUTE_RANGE_START_ADDR` / `RANGE_SIZE`: the allocation around it.
    pub range: (u64, u64),
    /// `CU_POINTER_ATTRIBUTE_MAPPED`: a virtual-memory mapping (`cuMemMap`).
    pub mapped: bool,
    /// `CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR` / `MAPPING_SIZE`: the mapping around it.
    pub mapping: (u64, u64),
    /// `CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE` is set: stream-ordered pool memory.
    pub from_pool: bool,
}

impl PointerAttributes {
    /// Asks the driver about `addr` (the context must be current). Never fails for an address
    /// CUDA does not know: `memory_type` is then 0.
    pub fn query(addr: u64) -> CudaResult<Self> {
        use sys::CUpointer_attribute as A;
        let mut attrs = [
            A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
            A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
            A::CU_POINTER_ATTRIBUTE_MAPPED,
            A::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
            A::CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
            A::CU_POINTER_ATTRIBUTE_MAPPING_SIZE,
        ];
        // Every slot is 8 bytes and zeroed, wider than any attribute's value (unsigned int,
        // int, bool, CUdeviceptr, size_t, a handle), so a narrower write leaves a value that
        // reads the same (little-endian).
        let mut vals = [0u64; 9];
        let mut data: [*mut c_void; 9] = std::array::from_fn(|i| {
            // SAFETY: in bounds of `vals`.
            unsafe { vals.as_mut_ptr().add(i) }.cast()
        });
        // SAFETY: `attrs` and `data` have 9 entries each; every data pointer points to 8
        // writable bytes that outlive the call. The call does not fail for unknown addresses.
        unsafe {
            sys::cuPointerGetAttributes(
                attrs.len() as u32,
                attrs.as_mut_ptr(),
                data.as_mut_ptr(),
                addr,
            )
        }
        .call("cuPointerGetAttributes")?;
        Ok(Self {
            memory_type: vals[0] as u32,
            is_managed: vals[1] as u32 != 0,
            device_ordinal: vals[2] as i32,
            range: (vals[3], vals[4]),
            mapped: vals[5] as u32 != 0,
            from_pool: vals[6] != 0,
            mapping: (vals[7], vals[8]),
        })
    }

    /// The SPEC §7.1 class of the memory for `agent` (device `ordinal`), or `None` where CUDA
    /// knows no allocation there (pageable host memory, a word that is not a pointer).
    ///
    /// | the driver says | class |
    /// |---|---|
    /// | managed | `MANAGED` |
    /// | host (`cuMemHostAlloc`, `cuMemAllocHost`, `cuMemHostRegister`) | `PINNED_HOST` |
    /// | device of another ordinal | `PEER`, owned by that device |
    /// | a `cuMemMap` mapping, or stream-ordered pool memory | `VIRTUAL_MAPPING` |
    /// | other device memory of this device | `DEVICE_COARSE` |
    ///
    /// IPC-imported memory is device memory to the driver's pointer attributes and cannot be
    /// told apart here; an extent the driver does not report gives `size` 0.
    pub fn classify(&self, addr: u64, agent: AgentId, ordinal: i32) -> Option<PointerInfo> {
        let class = match (self.memory_type, self.is_managed) {
            (0, false) => return None,
            (_, true) => MemoryClass::MANAGED,
            (1, _) => MemoryClass::PINNED_HOST,
            _ if self.device_ordinal != ordinal => MemoryClass::PEER,
            _ if self.mapped || self.from_pool => MemoryClass::VIRTUAL_MAPPING,
            _ => MemoryClass::DEVICE_COARSE,
        };
        let (base, size) = match (self.range, self.mapping) {
            ((b, n), _) if n > 0 && addr >= b && addr - b < n => (b, n),
            (_, (b, n)) if n > 0 && addr >= b && addr - b < n => (b, n),
            _ => (addr, 0),
        };
        let owner = if class == MemoryClass::PINNED_HOST {
            None
        } else if class == MemoryClass::PEER {
            Some(AgentId(self.device_ordinal.max(0) as u64))
        } else {
            Some(agent)
        };
        Some(PointerInfo {
            base,
            size,
            class,
            owner,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_attributes_give_the_spec_class() {
        let agent = AgentId(0);
        let dev = |ordinal| PointerAttributes {
            memory_type: 2,
            device_ordinal: ordinal,
            range: (0x1000, 0x1000),
            ..Default::default()
        };
        let c = |a: PointerAttributes| a.classify(0x1800, agent, 0).map(|i| (i.class, i.owner));
        assert_eq!(c(PointerAttributes::default()), None, "unknown to CUDA");
        assert_eq!(c(dev(0)), Some((MemoryClass::DEVICE_COARSE, Some(agent))));
        assert_eq!(
            c(dev(1)),
            Some((MemoryClass::PEER, Some(AgentId(1)))),
            "another device's memory"
        );
        assert_eq!(
            c(PointerAttributes {
                is_managed: true,
                ..dev(0)
            }),
            Some((MemoryClass::MANAGED, Some(agent)))
        );
        assert_eq!(
            c(PointerAttributes {
                memory_type: 1,
                ..dev(0)
            }),
            Some((MemoryClass::PINNED_HOST, None))
        );
        for a in [
            PointerAttributes {
                mapped: true,
                ..dev(0)
            },
            PointerAttributes {
                from_pool: true,
                ..dev(0)
            },
        ] {
            assert_eq!(c(a), Some((MemoryClass::VIRTUAL_MAPPING, Some(agent))));
        }
        // The extent: the range, else the mapping, else unknown (size 0).
        let i = PointerAttributes {
            mapped: true,
            range: (0, 0),
            mapping: (0x1000, 0x4000),
            ..dev(0)
        }
        .classify(0x1800, agent, 0)
        .unwrap();
        assert_eq!((i.base, i.size), (0x1000, 0x4000));
        let i = PointerAttributes {
            range: (0, 0),
            ..dev(0)
        }
        .classify(0x1800, agent, 0)
        .unwrap();
        assert_eq!((i.base, i.size), (0x1800, 0));
    }
}
