//! `rcclx_check`'s route model (`rccl-tests-compat/src/check.cu`, the part between its "route
//! model" markers) against rcclx's own decision (`intercept::decide`): the same route for every
//! collective, type, op, count and rank count of a grid, at the default crossovers with low
//! precision off, and on from 0 bytes, each with LL128 off and on up to 4 MiB, on one host and on
//! two hosts of 1-8 ranks (exact hierarchy, `RCCLX_HIER_RS` and `RCCLX_HIER_AG` off and on). The checker's model
//! is written apart from `decide` (so a wrong decision fails on the GPU); this keeps the two from
//! drifting apart when a crossover changes. Needs a C++ compiler (`$CXX`, else `c++`).

mod common;

use rcclx::collective::Proto;
use rcclx::collective::{COLLS, COUNT};
use rcclx::config::Config;
use rcclx::intercept::{CallDesc, Coll, CommFacts, Kernel, Policies, Route, decide};
use rcclx::types::{ncclDataType_t, ncclRedOp_t};

const COUNTS: [usize; 10] = [1, 7, 255, 1023, 4099, 23000, 40000, 65541, 1048581, 12582913];
const NRANKS: [usize; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
/// NCCL's types 0..=11 (int8 .. fp8e5m2) and ops: sum, prod, max, min, avg, a PreMulSum (5).
const TYPES: i32 = 12;
const OPS: i32 = 6;
/// `RCCLX_LL128_MAX_BYTES` of the runs with LL128 on (each setting is also run with it off).
const LL128_MAX: u64 = 4 << 20;

/// The route rcclx's statistics show for the call on `hosts` hosts of `n` ranks (one host: `n`
/// ranks), as its setup would agree on it: the policies of all `hosts x n` ranks; across hosts
/// only where something runs across them (the verdict, `clique::record`).
#[allow(clippy::too_many_arguments)]
fn rcclx_route(
    coll: Coll,
    t: i32,
    op: i32,
    count: usize,
    n: usize,
    hosts: usize,
    exact: bool,
    lowp: bool,
    ll128_max: u64,
) -> String {
    let mut cfg =
        Config { ll128_max_bytes: ll128_max, hier_exact: exact, hier_rs: exact, hier_ag: exact, ..Config::default() };
    if lowp {
        cfg.lowp_enable = true;
        cfg.lowp_min_bytes = Some(0);
    }
    let policies = Policies::for_comm(&cfg, n * hosts, rcclx::collective::Fabric::Switch);
    if hosts > 1 && (!policies.across_hosts() || (n == 1 && !lowp)) {
        return "forwarded".into(); // the verdict: nothing runs across these hosts
    }
    let facts = CommFacts { nranks: n, hosts, rank_step: 1, policies };
    let mut call = CallDesc::new(coll, count, ncclDataType_t(t));
    call.op = ncclRedOp_t(op);
    match decide(&call, &facts) {
        Route::Upstream(_) => "forwarded".into(),
        Route::AcrossHosts(Some(_)) => format!("{}.hier", coll.name()),
        Route::AcrossHosts(None) => {
            let size = ncclDataType_t(t).size().unwrap();
            let (c, a) = rcclx::plan::exact_counted_as(count, size, n, policies.ll_max);
            format!("{}.{}", c.name(), a.name())
        }
        Route::Own(a) => {
            let algo = match a {
                Kernel { codec: Some(_), .. } => "lowp",
                // RCCLX_PROTO=stream, which the checker's model does not know (it runs off).
                Kernel { proto: Proto::Stream, .. } => unreachable!("the default protocol is window"),
                exact => exact.name(),
            };
            format!("{}.{algo}", coll.name())
        }
    }
}

#[test]
fn rcclx_check_route_model_matches_decide() {
    let src = std::fs::read_to_string(common::repo().join("rccl-tests-compat/src/check.cu")).expect("check.cu");
    let begin = src.find("// ---- the route model").expect("the route model's first marker");
    let end = src.find("// ---- end of the route model").expect("the route model's last marker");
    // The checker's tables of collectives and types, from rcclx's (so only the model is tested).
    let colls: Vec<String> = COLLS.iter().map(|s| format!("{{{}, {}}}", s.reduces, s.root_only.is_some())).collect();
    let sizes: Vec<String> = (0..TYPES).map(|t| ncclDataType_t(t).size().unwrap_or(0).to_string()).collect();
    let program = format!(
        r#"#include <stdint.h>
#include <stdio.h>
#include <string>
enum ncclDataType_t {{ ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclUint64, ncclFloat16,
                       ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2 }};
struct TypeDesc {{ const char* name; ncclDataType_t type; int size; bool isFloat; int minVersion; }};
enum OpId {{ OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_MULSUM, OP_NONE }};
enum CollId {{ COLL_AR, COLL_AG, COLL_RS, COLL_A2A, COLL_BCAST, COLL_REDUCE }};
struct CollDesc {{ bool reduces, rooted; }};
static const CollDesc kColls[] = {{ {colls} }};
{model}
int main() {{
  const int sizes[] = {{ {sizes} }};
  const size_t counts[] = {{ {counts} }};
  const int nranks[] = {{ {nranks} }};
  for (int mode = 0; mode < 12; mode++) {{
    const int lowp = mode & 1, layout = mode / 4, hosts = layout ? 2 : 1;
    g_model.lowpAll = lowp;
    g_model.lowpMin = lowp ? 0 : -1;
    g_model.ll128Max = mode & 2 ? {ll128} : 0;
    g_model.hierExact = layout == 2;
    g_model.hierRs = layout == 2;
    g_model.hierAg = layout == 2;
    for (int n : nranks)
      for (int c = 0; c < {ncolls}; c++)
        for (int t = 0; t < {types}; t++)
          for (int op = 0; op < {ops}; op++) {{
            if (!kColls[c].reduces && op > 0) continue;
            const TypeDesc td{{"", (ncclDataType_t)t, sizes[t], false, 0}};
            for (size_t count : counts) {{
              const OpId o = kColls[c].reduces ? (OpId)op : OP_NONE;
              g_model.local = layout ? n : 0;
              const std::string r = expectedRoute((CollId)c, &td, o, count, kColls[c].rooted ? 0 : -1, n * hosts);
              printf("%d %d %d %d %d %zu %s %llu %d %d\n", lowp, n, c, t, op, count, r.c_str(),
                     (unsigned long long)g_model.ll128Max, hosts, layout == 2);
            }}
          }}
  }}
}}
"#,
        colls = colls.join(", "),
        model = &src[begin..end],
        sizes = sizes.join(", "),
        counts = COUNTS.map(|c| c.to_string()).join(", "),
        nranks = NRANKS.map(|n| n.to_string()).join(", "),
        ncolls = COUNT,
        types = TYPES,
        ops = OPS,
        ll128 = LL128_MAX,
    );
    let dir = std::env::temp_dir().join(format!("rcclx-route-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let (cpp, exe) = (dir.join("model.cpp"), dir.join("model"));
    std::fs::write(&cpp, program).expect("writing the model's program");
    common::must(common::cxx().args(["-std=c++17", "-O1", "-Wall", "-Werror", "-o"]).arg(&exe).arg(&cpp), "c++");
    let out = common::stdout_of(&mut std::process::Command::new(&exe), "the model's program");
    let _ = std::fs::remove_dir_all(&dir);
    let mut checked = 0;
    let mut wrong = Vec::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| f[i].parse::<usize>().expect("a number");
        let (lowp, n, c, t, op, count) = (num(0) == 1, num(1), num(2), num(3) as i32, num(4) as i32, num(5));
        let ll128_max = f[7].parse::<u64>().expect("a number");
        let (hosts, exact) = (num(8), num(9) == 1);
        let want = rcclx_route(Coll::ALL[c], t, op, count, n, hosts, exact, lowp, ll128_max);
        if f[6] != want {
            wrong.push(format!("{line}: rcclx routes it {want}"));
        }
        checked += 1;
    }
    let per_count: usize = COLLS.iter().map(|s| if s.reduces { TYPES * OPS } else { TYPES } as usize).sum();
    let expected_lines = 12 * NRANKS.len() * COUNTS.len() * per_count;
    assert_eq!(checked, expected_lines, "the model's program printed {checked} lines");
    assert!(
        wrong.is_empty(),
        "{} of {checked} routes differ, e.g.:\n{}",
        wrong.len(),
        wrong[..wrong.len().min(10)].join("\n")
    );
}
