//! The invariants every scheduled plan must keep, checked from the plan and the scheduled
//! graph alone (for tests and fuzzing): every node on a backend that supports it and writes
//! memory it can use; every source readable by its node's backend or copied; no tensor
//! copied twice to one backend; splits covering the scheduled nodes in order; no copy read
//! before the value it holds was computed; and the allocation invariants.

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::allocator::check::check_allocation;
use crate::device::Device;
use crate::error::Result;
use crate::graph::Graph;
use crate::op::Op;
use crate::sched::SplitPlan;
use crate::tensor::TensorId;

/// The violated invariants of `plan`, whose scheduled graph `sg` was planned from `user` over
/// `devices` (the scheduler's backends' devices, in its order); empty when all hold.
pub fn check_plan(plan: &SplitPlan, sg: &Graph, user: &Graph, devices: &[&'static dyn Device]) -> Result<Vec<String>> {
    let mut v = Vec::new();
    // Assignments: every user node on a backend that supports it.
    for a in &plan.assignments {
        let t = user.tensor(a.tensor)?;
        if t.op() != Op::None && !t.op().is_view() && !devices[a.backend].supports_op(user, a.tensor) {
            v.push(format!(
                "'{}' ({}) is assigned to {}, which does not support it",
                a.name, a.op, plan.backends[a.backend]
            ));
        }
    }
    // Splits cover the scheduled nodes, in order.
    let mut cursor = 0;
    for (i, s) in plan.splits.iter().enumerate() {
        if s.nodes.start != cursor || s.nodes.end < s.nodes.start {
            v.push(format!("split {i} covers nodes {:?}, expected to start at {cursor}", s.nodes));
        }
        cursor = s.nodes.end.max(cursor);
    }
    if cursor != sg.nodes().len() {
        v.push(format!("the splits end at node {cursor}, the scheduled graph has {}", sg.nodes().len()));
    }
    // Every user node exactly once.
    for &n in user.nodes() {
        let count = sg.nodes().iter().filter(|&&x| x == n).count();
        if count != 1 {
            v.push(format!("user node '{}' appears {count} times in the scheduled graph", user.label(n)));
        }
    }
    let mut copied: BTreeSet<(TensorId, usize)> = BTreeSet::new();
    for (i, s) in plan.splits.iter().enumerate() {
        let b = s.backend;
        let dev = devices[b];
        let usable = |id: TensorId| sg.data(id).is_some_and(|d| dev.supports_buffer_type(d.buffer.buffer_type()));
        for input in &s.inputs {
            if !copied.insert((input.tensor, b)) {
                v.push(format!("'{}' is copied to {} twice", input.name, plan.backends[b]));
            }
            if input.copies.len() != plan.n_copies {
                v.push(format!("'{}' has {} copies, not {}", input.name, input.copies.len(), plan.n_copies));
            }
            for &c in &input.copies {
                if !usable(c) {
                    v.push(format!("copy '{}' of split {i} is not in memory of {}", sg.label(c), plan.backends[b]));
                }
            }
            let from_ok =
                sg.data(input.tensor).is_some_and(|d| devices[input.from].supports_buffer_type(d.buffer.buffer_type()));
            if !from_ok {
                v.push(format!("input '{}' of split {i} does not live on {}", input.name, plan.backends[input.from]));
            }
        }
        for idx in s.nodes.clone() {
            let Some(&id) = sg.nodes().get(idx) else { continue };
            let t = sg.tensor(id)?;
            if t.op() == Op::None || t.op().is_view() {
                continue;
            }
            let label = format!("'{}' ({}) in split {i} on {}", sg.label(id), t.op().name(), plan.backends[b]);
            if let Some(a) = plan.assignments.iter().find(|a| a.tensor == id) {
                if a.backend != b {
                    v.push(format!("{label} is assigned to {}", plan.backends[a.backend]));
                }
            }
            if !dev.supports_op(sg, id) {
                v.push(format!("{label}: the device does not support it"));
            }
            if !usable(id) {
                v.push(format!(
                    "{label}: writes memory its backend cannot use ({:?})",
                    sg.data(id).map(|d| String::from(d.buffer.buffer_type().name()))
                ));
            }
            for (slot, src) in t.srcs() {
                if !usable(src) {
                    v.push(format!(
                        "{label}: source {slot} '{}' is in memory its backend cannot use ({:?}) and was not copied",
                        sg.label(src),
                        sg.data(src).map(|d| String::from(d.buffer.buffer_type().name()))
                    ));
                }
            }
        }
    }
    // Copies are taken when their split starts: no node that writes the copied memory (the
    // tensor itself, or a CPY into the memory it views) may run between that and a reader of
    // the copy that comes after it in node order; the reader would see the value from before.
    // A user input is copied by the host without waiting for any backend: no node may write it.
    let computed = |id: TensorId| sg.tensor(id).is_ok_and(|t| t.op() != Op::None && !t.op().is_view());
    for (i, s) in plan.splits.iter().enumerate() {
        for input in &s.inputs {
            let x = input.tensor;
            let root = sg.tensor(x)?.view_src().unwrap_or(x);
            let writers: Vec<(usize, TensorId)> = sg
                .nodes()
                .iter()
                .enumerate()
                .filter(|&(_, &w)| computed(w) && (w == x || sg.tensor(w).is_ok_and(|t| t.view_src() == Some(root))))
                .map(|(wi, &w)| (wi, w))
                .collect();
            for (ri, &r) in sg.nodes().iter().enumerate() {
                if !sg.tensor(r)?.srcs().any(|(_, src)| input.copies.contains(&src)) {
                    continue;
                }
                for &(wi, w) in writers.iter().filter(|&&(_, w)| w != r) {
                    if input.user_input && wi < ri {
                        v.push(format!(
                            "'{}' (node {ri}) reads '{}' as a user input, copied by the host when split {i} starts, but '{}' (node {wi}, split {}) computes it",
                            sg.label(r),
                            input.name,
                            sg.label(w),
                            plan.splits.iter().position(|s| s.nodes.contains(&wi)).map_or(String::from("?"), |k| format!("{k}")),
                        ));
                    } else if wi >= s.nodes.start && wi < ri {
                        v.push(format!(
                            "'{}' (node {ri}) reads the copy of '{}' taken when split {i} starts (node {}), before '{}' (node {wi}) writes it",
                            sg.label(r),
                            input.name,
                            s.nodes.start,
                            sg.label(w),
                        ));
                    }
                }
            }
        }
    }
    if let Err(e) = check_allocation(sg)? {
        v.push(format!("allocation: {e}"));
    }
    Ok(v)
}
