//! The split plan: what the scheduler decided, as a value that prints.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::sched::assign::Cause;
use crate::sched::split::Split;
use crate::tensor::TensorId;

/// One node's backend and the pass that chose it.
#[derive(Clone, Debug)]
pub struct NodeAssignment {
    pub tensor: TensorId,
    pub name: String,
    pub op: &'static str,
    pub backend: usize,
    pub cause: Cause,
}

/// Splits, their inputs and copies, and the compute buffer each backend needs.
#[derive(Clone, Debug, Default)]
pub struct SplitPlan {
    /// Backend names in priority order.
    pub backends: Vec<String>,
    pub splits: Vec<Split>,
    /// Copies per input (pipeline slots).
    pub n_copies: usize,
    /// Compute buffer bytes per backend (0 before allocation).
    pub buffer_sizes: Vec<usize>,
    /// Every node of the user's graph with its backend and cause.
    pub assignments: Vec<NodeAssignment>,
}

impl SplitPlan {
    /// Number of input copies the plan makes per run.
    pub fn n_input_copies(&self) -> usize {
        self.splits.iter().map(|s| s.inputs.len()).sum()
    }

    /// A `Display` of the plan that also lists every node's backend and cause.
    pub fn detailed(&self) -> Detailed<'_> {
        Detailed(self)
    }
}

impl fmt::Display for SplitPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "split plan: {} split(s) over {} ({} cop{} per input)",
            self.splits.len(),
            self.backends.join(", "),
            self.n_copies,
            if self.n_copies == 1 { "y" } else { "ies" }
        )?;
        for (i, s) in self.splits.iter().enumerate() {
            write!(
                f,
                "  split {i}: {}, nodes {}..{}, {} input(s)",
                self.backends[s.backend],
                s.nodes.start,
                s.nodes.end,
                s.inputs.len()
            )?;
            for input in &s.inputs {
                let kind = if input.user_input { "user input " } else { "" };
                write!(
                    f,
                    "\n    {kind}'{}': {} -> {}, {} B{}{}",
                    input.name,
                    self.backends[input.from],
                    self.backends[s.backend],
                    input.bytes,
                    if input.packed { " in packed rows" } else { "" },
                    input.route.describe()
                )?;
            }
            writeln!(f)?;
        }
        write!(f, "  compute buffers:")?;
        for (name, size) in self.backends.iter().zip(&self.buffer_sizes) {
            write!(f, " {name} {size} B;")?;
        }
        writeln!(f)
    }
}

/// The plan with its node assignments (`TESSERA_SCHED_DEBUG=2`).
pub struct Detailed<'a>(&'a SplitPlan);

impl fmt::Display for Detailed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        for n in &self.0.assignments {
            // Unnamed tensors are labelled "#id OP" already.
            if n.name.starts_with('#') {
                write!(f, "  node {}", n.name)?;
            } else {
                write!(f, "  node #{} {} ({})", n.tensor.0, n.name, n.op)?;
            }
            writeln!(f, ": {} [{}]", self.0.backends[n.backend], n.cause.tag())?;
        }
        writeln!(f, "  tags:")?;
        for cause in Cause::ALL {
            writeln!(f, "    {:<6} {}", cause.tag(), cause.meaning())?;
        }
        Ok(())
    }
}
