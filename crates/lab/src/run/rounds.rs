//! The headline's interleaved rounds (`[load.headline]`): the paper's claims, each a ratio of
//! two policies at one load level, measured so that the ratio comes with an honest interval.
//!
//! Every contender of a claim level gets its own cluster, started once and kept up for all the
//! rounds. Round r then runs each contender at the level once, one window each, back to back,
//! the order rotated by r (so no contender always comes first, or always after the same
//! rival). Whatever slows this shared machine for a while (another engineer's build, say)
//! slows the windows of one round alike, so the ratio within a round keeps the comparison and
//! drops most of the drift; the interval over the rounds' ratios (Student t on their logs,
//! `capstan_report::PairedRatio`, computed in the report) holds what is left: window-to-window
//! noise and drift faster than a round. A contender's cluster idles while the others run (its
//! switch still gathers load every T_gat), and every contender idles the same share of time.
//!
//! Round r's windows take the request stream of repetition r (`window_seed`): the contenders of
//! a round see the same sequence of requests, and each round another one.

use crate::model::error::LabError;
use crate::model::results::RunRecord;
use crate::procs::cluster::Cluster;
use crate::run::plan::{window_seed, HeadlinePlan};
use crate::run::window::{start_cluster, Ctx, Window};

/// Runs every round at every claim level; each window is added to its series' runs with
/// `round` set.
pub(crate) async fn run(
    ctx: &mut Ctx<'_>,
    h: &HeadlinePlan,
    runs: &mut [Vec<RunRecord>],
) -> Result<(), LabError> {
    let plan = ctx.plan;
    let mut clusters = start_clusters(ctx, h).await?;
    for (level, members) in &h.levels {
        for round in 0..h.rounds {
            let seed = window_seed(plan.seed, round);
            for i in HeadlinePlan::order(members, round) {
                let Some((_, c)) = clusters.iter_mut().find(|(j, _)| *j == i) else {
                    continue;
                };
                let w = Window {
                    level: *level,
                    rep: round,
                    seed,
                    duration: h.duration,
                };
                let mut rec = ctx.window(&plan.series[i], c, w).await?;
                rec.round = Some(round);
                runs[i].push(rec);
            }
        }
    }
    Ok(())
}

/// One cluster per contender, each with its logs in `OUT/logs/headline-LABEL/`, warmed up at
/// the first level it runs at.
async fn start_clusters(
    ctx: &mut Ctx<'_>,
    h: &HeadlinePlan,
) -> Result<Vec<(usize, Cluster)>, LabError> {
    let plan = ctx.plan;
    let seed = window_seed(plan.seed, 0);
    let mut clusters = Vec::new();
    for i in h.members() {
        let s = &plan.series[i];
        let dir = ctx
            .o
            .work_dir
            .join(format!("headline-{}", file_name(&s.label)));
        let c = start_cluster(plan, s, ctx.o, &dir, seed).await?;
        ctx.probe_path(s, &c).await?;
        let first = h
            .levels
            .iter()
            .find(|(_, m)| m.contains(&i))
            .map_or(plan.levels[0], |(l, _)| *l);
        ctx.warm_up(s, &c, first, seed).await?;
        clusters.push((i, c));
    }
    Ok(clusters)
}

/// A series label as a file name: letters, digits and `-`, `.`, `_` kept, the rest `_`.
fn file_name(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-._".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_become_file_names() {
        assert_eq!(
            file_name("weighted-round-robin:metric=service-time · SMP 2x2"),
            "weighted-round-robin_metric_service-time___SMP_2x2"
        );
    }
}
