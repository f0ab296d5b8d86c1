//! The window's side of a capture a tool asks for in PASS ENTER (SPEC §13, §6 step 8): the
//! scope's regions read before the pass (with the code image), their outputs read after a clean
//! scope check, and the capture, or why there is none, handed to the tool's sink.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::{PendingCapture, Window};
use crate::capture::{uncapturable_class, Capture, CaptureRefused, CaptureRequest, CaptureSink};
use crate::error::BackendError;
use crate::locks::{AgentGate, CallbackScope};
use crate::types::DispatchId;

/// Hands a capture (or why none was made) to its sink, as tool code: a panic is logged.
pub(super) fn deliver_capture(
    gate: &AgentGate,
    dispatch: DispatchId,
    sink: &CaptureSink,
    result: Result<Capture, CaptureRefused>,
) {
    if let Err(e) = &result {
        log::warn!("[kernel-replay] dispatch {dispatch}: no capture: {e}");
    }
    let _scope = CallbackScope::enter(gate);
    if catch_unwind(AssertUnwindSafe(|| sink(result))).is_err() {
        log::error!("[kernel-replay] dispatch {dispatch}: the capture sink panicked");
    }
}

impl Window<'_> {
    /// A capture asked for outside PASS ENTER is refused, to its own sink.
    pub(super) fn refuse_misplaced(&self, request: Option<CaptureRequest>) {
        if let Some(r) = request {
            deliver_capture(
                self.gate,
                self.record.dispatch_id,
                &r.sink,
                Err(CaptureRefused::NotInPassEnter),
            );
        }
    }

    /// Reads the inputs of a capture asked for in PASS ENTER of `pass` (SPEC §13): memory
    /// holds them now (the snapshot was just taken, or restored for this pass).
    pub(super) fn capture_begin(&mut self, request: CaptureRequest, pass: u32, ordered: bool) {
        match self.capture_inputs(&request, pass, ordered) {
            Ok(capture) => {
                self.pending_capture = Some(PendingCapture {
                    sink: request.sink,
                    capture,
                })
            }
            Err(e) => deliver_capture(self.gate, self.record.dispatch_id, &request.sink, Err(e)),
        }
    }

    fn capture_inputs(
        &self,
        request: &CaptureRequest,
        pass: u32,
        ordered: bool,
    ) -> Result<Capture, CaptureRefused> {
        if self.dispatch.arg_layout == crate::types::ArgLayout::Unknown {
            return Err(CaptureRefused::UnknownLayout);
        }
        let mut scope = self.scope_regions.clone();
        scope.sort_by_key(|r| r.base);
        let bytes: u64 = scope.iter().map(|r| r.size).sum();
        if bytes > request.max_bytes {
            return Err(CaptureRefused::TooLarge {
                bytes,
                regions: scope.len(),
                max: request.max_bytes,
            });
        }
        if let Some((r, why)) = scope
            .iter()
            .find_map(|r| uncapturable_class(r.class).map(|w| (r, w)))
        {
            return Err(CaptureRefused::Uncapturable {
                base: r.base,
                size: r.size,
                why,
            });
        }
        let backend = |e: BackendError| CaptureRefused::Backend(e.to_string());
        let code = self.agent.code_image(self.dispatch).map_err(backend)?;
        if ordered && pass > 0 {
            // The restore before this pass may still run on the device.
            self.memory
                .sync_ordered(&self.wait_spec())
                .map_err(backend)?;
        }
        let mut regions = Vec::with_capacity(scope.len());
        for r in scope {
            let mut input = vec![0u8; r.size as usize];
            self.memory
                .read_to_host(r.base, &mut input)
                .map_err(backend)?;
            // A module variable of the kernel's own image is named, so a standalone replay
            // finds it in the image it loads; another image's is plain memory there.
            let symbol = r
                .class
                .contains(crate::backend::MemoryClass::MODULE_VARIABLE)
                .then(|| {
                    code.variables
                        .iter()
                        .find(|v| v.base == r.base && r.size <= v.size)
                })
                .flatten()
                .map(|v| v.name.clone());
            regions.push(crate::capture::CapturedRegion {
                base: r.base,
                size: r.size,
                class: r.class,
                symbol,
                input,
                output: Vec::new(),
            });
        }
        Ok(Capture {
            info: self.info().clone(),
            kernel: self.dispatch.kernel,
            kernarg: self.dispatch.kernarg.to_vec(),
            arg_layout: self.dispatch.arg_layout,
            scope: self.record.scope,
            pass,
            device: self.agent.device_description(),
            code,
            regions,
        })
    }

    /// Completes a pending capture: after a clean scope check, reads the outputs and hands it
    /// over; otherwise hands over why there is none.
    pub(super) fn capture_finish(&mut self, outcome: Result<(), CaptureRefused>) {
        let Some(PendingCapture { sink, mut capture }) = self.pending_capture.take() else {
            return;
        };
        let result = outcome.and_then(|()| {
            for r in &mut capture.regions {
                let mut out = vec![0u8; r.size as usize];
                self.memory
                    .read_to_host(r.base, &mut out)
                    .map_err(|e| CaptureRefused::Backend(e.to_string()))?;
                r.output = out;
            }
            Ok(capture)
        });
        deliver_capture(self.gate, self.record.dispatch_id, &sink, result);
    }
}
