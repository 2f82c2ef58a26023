//! A program of a loaded plugin: a split its backend prepared, replayed on each run.

use alloc::format;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::any::Any;
use core::mem::offset_of;
use core::ops::Range;

use tessera_core::{Buffer, Error, Graph, Program, Result};

use super::{free_handle, PluginShared};
use crate::abi::Ctx;
use crate::tables::{AbiProgram, AbiProgramFns, ProgramFns};

/// The buffers a split's descriptors refer to.
pub(super) type SplitBuffers = Vec<Arc<dyn Buffer>>;

/// A split prepared by a plugin's backend.
///
/// The plugin keeps the graph it was last given (by `prepare` or `update`) and replays the
/// program over it, so the memory that graph refers to must outlive the program or its next
/// update: the program holds those buffers.
pub struct PluginProgram {
    shared: Arc<PluginShared>,
    fns: ProgramFns,
    ctx: Ctx,
    /// The backend that prepared it (its token).
    backend: Arc<()>,
    /// The split's nodes in the host's graph.
    nodes: Range<usize>,
    buffers: SplitBuffers,
}

// SAFETY: a program is used by the thread that uses its backend, one at a time (`&mut`), and
// may be freed from any thread (the ABI's contract); its buffers are `Send + Sync`.
unsafe impl Send for PluginProgram {}

impl PluginProgram {
    /// Wraps a program handle; on failure the handle is freed.
    ///
    /// # Safety
    /// `handle` must be a program handle the plugin of `shared` just returned.
    pub(super) unsafe fn wrap(
        shared: &Arc<PluginShared>,
        handle: AbiProgram,
        backend: Arc<()>,
        nodes: Range<usize>,
        buffers: SplitBuffers,
    ) -> Result<PluginProgram> {
        // SAFETY: the plugin's program function table.
        let fns = match unsafe { ProgramFns::read(handle.fns) } {
            Ok(fns) => fns,
            Err(e) => {
                // SAFETY: the handle's own free function (if readable), exactly once.
                unsafe { free_handle(handle.fns, handle.ctx, offset_of!(AbiProgramFns, free), |t| t.free) };
                return Err(e);
            }
        };
        shared.hold();
        Ok(PluginProgram { shared: shared.clone(), fns, ctx: handle.ctx, backend, nodes, buffers })
    }

    /// Whether the backend of `token` prepared this program.
    pub(super) fn belongs_to(&self, token: &Arc<()>) -> bool {
        Arc::ptr_eq(&self.backend, token)
    }

    pub(super) fn ctx(&self) -> Ctx {
        self.ctx
    }

    /// The plugin now holds the split as `buffers` describe it.
    pub(super) fn updated(&mut self, nodes: Range<usize>, buffers: SplitBuffers) {
        self.nodes = nodes;
        self.buffers = buffers;
    }

    /// Fails unless `graph` has the split's nodes (a cheap check that it is the graph the
    /// program was prepared for).
    pub(super) fn check_graph(&self, graph: &Graph) -> Result<()> {
        if self.nodes.end > graph.nodes().len() {
            return Err(Error::InvalidParam {
                op: "RUN",
                message: format!(
                    "the program computes nodes {:?} but the graph has {} nodes; prepare it for this graph",
                    self.nodes,
                    graph.nodes().len()
                ),
            });
        }
        Ok(())
    }
}

impl Drop for PluginProgram {
    fn drop(&mut self) {
        // SAFETY: the program's own free function and context, called exactly once; its
        // buffers are dropped after it.
        unsafe { self.shared.release(self.fns.free, self.ctx) };
    }
}

impl Program for PluginProgram {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
