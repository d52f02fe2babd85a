// SCORED_REF_MULTIVERSION: compile a hot loop for AVX-512, AVX2+FMA and baseline x86-64 and pick one at
// load time (GCC target_clones, glibc ifunc). Only for code whose values cannot depend on the choice:
// exact double products of fp32 values summed in a fixed order (an FMA of an exact product rounds the
// same as the separate add), with -ffp-contract=off for everything else.
#ifndef SCORED_ENGINE_REFERENCE_MULTIVERSION_H_
#define SCORED_ENGINE_REFERENCE_MULTIVERSION_H_

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SCORED_REF_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SCORED_REF_MULTIVERSION
#endif

#endif  // SCORED_ENGINE_REFERENCE_MULTIVERSION_H_
