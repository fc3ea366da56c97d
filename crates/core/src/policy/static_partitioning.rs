use super::support::Rotor;
use super::{Needs, Partitions, Policy, PolicyContext, PolicyError, RequestInfo};
use crate::view::{ClusterView, NodeId};

use super::registry::{check, read, Params, Registration};

/// Parameters of `static-partitioning`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StaticPartitioningParams {
    /// Class name → node names. Every name must be defined.
    #[serde(default)]
    partitions: Partitions,
    /// Nodes for the classes `partitions` does not list. Absent: those classes use every node.
    #[serde(default)]
    default: Option<Vec<String>>,
}

pub(super) const REGISTRATION: Registration = Registration {
    name: "static-partitioning",
    about: "each class is served only by its own subset of nodes; round robin within it",
    params: "partitions = { class = [nodes] }, default = [nodes]",
    seeded: false,
    check: check::<StaticPartitioningParams>,
    build: |params: &Params, ctx: &PolicyContext<'_>| {
        let p: StaticPartitioningParams = read("static-partitioning", params)?;
        Ok(Box::new(StaticPartitioning::new(
            ctx,
            &p.partitions,
            p.default.as_deref(),
        )?))
    },
};

/// Static partitioning (the CAP paper's rival, how commercial layer-7 switches dedicate servers
/// to services): each class is served only by its own subset of nodes, round robin within the
/// subset. Classes the configuration does not list use the `default` subset when one is given,
/// otherwise every node. When every node of a class's subset is unavailable the request gets no
/// node (`None`): spilling onto other partitions would break the isolation the operator asked
/// for.
#[derive(Debug)]
pub struct StaticPartitioning {
    /// Node ids per class id; the last entry serves class ids the policy was not built for.
    members: Box<[Box<[NodeId]>]>,
    /// One round-robin pointer per entry of `members`.
    pointers: Box<[Rotor]>,
}

impl StaticPartitioning {
    pub fn new(
        ctx: &PolicyContext<'_>,
        partitions: &Partitions,
        default: Option<&[String]>,
    ) -> Result<Self, PolicyError> {
        for class in partitions.keys() {
            if !ctx.classes.contains(class) {
                return Err(invalid(format!(
                    "partitions name class `{class}`, which is not defined (classes: {})",
                    ctx.classes.join(", ")
                )));
            }
        }
        let everyone: Box<[NodeId]> = (0..ctx.nodes.len()).collect();
        let fallback = match default {
            Some(names) => resolve(ctx, "the default partition", names)?,
            None => everyone,
        };
        let mut members = Vec::with_capacity(ctx.classes.len() + 1);
        for class in ctx.classes {
            members.push(match partitions.get(class) {
                Some(names) => resolve(ctx, &format!("the partition of class `{class}`"), names)?,
                None => fallback.clone(),
            });
        }
        members.push(fallback);
        let pointers = members.iter().map(|_| Rotor::new()).collect();
        Ok(StaticPartitioning {
            members: members.into_boxed_slice(),
            pointers,
        })
    }
}

fn invalid(message: String) -> PolicyError {
    PolicyError::Invalid(format!("static-partitioning: {message}"))
}

fn resolve(
    ctx: &PolicyContext<'_>,
    what: &str,
    names: &[String],
) -> Result<Box<[NodeId]>, PolicyError> {
    if names.is_empty() {
        return Err(invalid(format!("{what} has no nodes")));
    }
    let mut ids = Vec::with_capacity(names.len());
    for name in names {
        let id = ctx.nodes.iter().position(|n| n == name).ok_or_else(|| {
            invalid(format!(
                "{what} names node `{name}`, which is not defined (nodes: {})",
                ctx.nodes.join(", ")
            ))
        })?;
        if ids.contains(&id) {
            return Err(invalid(format!("{what} lists node `{name}` twice")));
        }
        ids.push(id);
    }
    Ok(ids.into_boxed_slice())
}

impl Policy for StaticPartitioning {
    fn needs(&self) -> Needs {
        Needs {
            request_content: true,
            ..Needs::default()
        }
    }

    fn name(&self) -> &'static str {
        "static-partitioning"
    }

    fn pick(&self, req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        let entry = req.class.min(self.members.len() - 1);
        let members = &self.members[entry];
        let n = view.node_count();
        let slot = self.pointers[entry].next(members.len(), |slot| {
            let id = members[slot];
            id < n && view.node(id).available
        })?;
        Some(members[slot])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::support::testing::{check_common_behaviour, request};
    use crate::view::StaticView;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn build(
        partitions: &[(&str, &[&str])],
        default: Option<&[&str]>,
    ) -> Result<StaticPartitioning, PolicyError> {
        let nodes = names(&["a", "b", "c", "d"]);
        let classes = names(&["static", "disk", "cpu", "cpu-disk"]);
        let ctx = PolicyContext {
            nodes: &nodes,
            classes: &classes,
        };
        let partitions: Partitions = partitions
            .iter()
            .map(|(class, nodes)| (class.to_string(), names(nodes)))
            .collect();
        let default = default.map(names);
        StaticPartitioning::new(&ctx, &partitions, default.as_deref())
    }

    fn picks_for(
        policy: &StaticPartitioning,
        view: &StaticView,
        class: usize,
        count: usize,
    ) -> Vec<NodeId> {
        (0..count)
            .map(|_| policy.pick(&request(class, "/"), view).unwrap())
            .collect()
    }

    #[test]
    fn each_class_stays_in_its_partition() {
        let policy = build(&[("cpu", &["c", "d"]), ("disk", &["b"])], None).unwrap();
        let view = StaticView::uniform(4);
        assert_eq!(picks_for(&policy, &view, 2, 4), vec![2, 3, 2, 3]);
        assert_eq!(picks_for(&policy, &view, 1, 3), vec![1, 1, 1]);
        // Unlisted classes use every node when no default partition is given.
        assert_eq!(picks_for(&policy, &view, 0, 4), vec![0, 1, 2, 3]);
    }

    #[test]
    fn unlisted_classes_use_the_default_partition_when_given() {
        let policy = build(&[("cpu", &["c", "d"])], Some(&["a", "b"])).unwrap();
        let view = StaticView::uniform(4);
        assert_eq!(picks_for(&policy, &view, 0, 3), vec![0, 1, 0]);
        assert_eq!(picks_for(&policy, &view, 3, 2), vec![0, 1]);
        assert_eq!(picks_for(&policy, &view, 17, 2), vec![0, 1]);
    }

    #[test]
    fn a_partition_with_no_available_node_gets_none() {
        let policy = build(&[("cpu", &["c", "d"])], None).unwrap();
        let mut view = StaticView::uniform(4);
        view.nodes[2].available = false;
        assert_eq!(picks_for(&policy, &view, 2, 2), vec![3, 3]);
        view.nodes[3].available = false;
        assert_eq!(policy.pick(&request(2, "/"), &view), None);
        assert!(policy.pick(&request(0, "/"), &view).is_some());
        // A view that lost nodes c and d in a reload race: nothing to pick, no panic.
        assert_eq!(policy.pick(&request(2, "/"), &StaticView::uniform(2)), None);
    }

    #[test]
    fn configuration_mistakes_are_named() {
        let err = |r: Result<StaticPartitioning, PolicyError>| r.unwrap_err().to_string();
        let e = err(build(&[("gpu", &["a"])], None));
        assert!(e.contains("class `gpu`") && e.contains("cpu-disk"), "{e}");
        let e = err(build(&[("cpu", &["z"])], None));
        assert!(e.contains("node `z`") && e.contains("class `cpu`"), "{e}");
        let e = err(build(&[("cpu", &[])], None));
        assert!(e.contains("no nodes"), "{e}");
        let e = err(build(&[("cpu", &["a", "a"])], None));
        assert!(e.contains("twice"), "{e}");
        let e = err(build(&[], Some(&["q"])));
        assert!(e.contains("default partition") && e.contains("`q`"), "{e}");
        assert!(e.starts_with("static-partitioning: "), "{e}");
    }

    #[test]
    fn shared_behaviour() {
        check_common_behaviour(&build(&[], None).unwrap(), 4);
    }
}
