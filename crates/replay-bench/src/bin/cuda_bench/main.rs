//! `cuda_bench`: the GPU bench of the CUDA backend as a binary of its own, the same as
//! `kreplay bench --backend cuda` (see [`replay_bench`] for commands and options).

use replay_bench::{main_with_args, SelfInvocation};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(main_with_args(args, SelfInvocation::current(&[])));
}
