#!/usr/bin/env python3
"""Layering check: no header is included by a target that does not link the header's target.

For every target of engine/ and server/ (add_library / add_executable in their CMakeLists.txt), every
`#include "engine/..."`, `"server/..."` or `"proto/..."` in the target's sources and in the headers it owns
must name a header of the target itself or of a target it links: its own PUBLIC and PRIVATE deps plus,
transitively, their PUBLIC/INTERFACE deps. A header belongs to the target compiling the .cc/.cu of the
same name, else to the first target of its folder; a header-only INTERFACE target owns every header of its
folder. Also the layer rules of engine/README.md on the links themselves (LINK_RULES), and the layer plan's
rule (engine/model/layer_plan.h): outside engine/model/, no source reads a family flag of ModelConfig
(FAMILY_FLAGS); the backends, the shard plan's users and the server read the ModelPlan instead. Prints each
violation; exit status 1 if any.

usage: scripts/check_layers.py [repo root]   (default: the checkout holding this script)
"""
import os
import re
import sys

FOLDERS = ['engine', 'engine/base', 'engine/model', 'engine/tokenizer', 'engine/reference', 'engine/kernels',
           'engine/dist', 'engine/cuda', 'server']
# target -> ('only', allowed scored_* deps) or ('not', forbidden scored_* deps), over everything it links.
LINK_RULES = {
    'scored_base': ('only', set()),
    'scored_model': ('only', {'scored_base'}),
    'scored_kernels': ('only', {'scored_base'}),
    'scored_reference_ops': ('only', {'scored_engine_api'}),
    'scored_cuda_engine': ('not', {'scored_reference_ops', 'scored_reference', 'scored_engine'}),
}
INCLUDE = re.compile(r'#include "((?:engine|server|proto)/[^"]+)"')
# ModelConfig's structure flags (engine/model/config.h): what PlanModel turns into the layer plan. A read is
# the member name after a ModelConfig receiver (`c.`, `config.`, `config_.`, `cfg.`, `config().`, ...: the
# names this code base gives a ModelConfig), so the plan's members of the same names stay readable, and so do
# a config's numbers (sizes, eps, RoPE parameters).
FAMILY_FLAGS = re.compile(
    r'(?:\b(?:c|cfg|config_?|model_config|ref_config|reference_config|local)|config\(\))\s*(?:\.|->)'
    r'(gemma_norm|sandwich_norms|embedding_scale|attention_scale|attn_logit_softcap|final_logit_softcap|'
    r'mlp_activation|layer_local_rope|LocalRope|attention_bias|qk_norm|IsSparseLayer|sparse_layers|'
    r'norm_topk_prob|LayerWindow|layer_window|shared_expert_intermediate_size|local_rope_theta|'
    r'local_rope_scaling|sliding_window|qk_norm_whole|shared_expert_gated|sigmoid_router|router_correction_bias|'
    r'router_num_groups|router_topk_groups|router_renorm_epsilon|routed_scaling_factor|latent_attention|'
    r'q_lora_rank|kv_lora_rank|qk_nope_head_dim|qk_rope_head_dim|v_head_dim|rope_interleave|moe(?=\(\)))\b')
FLAG_FREE = ['engine', 'server', 'client']  # where the rule holds (engine/model/ excepted)


def parse(root):
    targets = {}    # name -> {dir, sources, public, private}
    interface = {}  # folder -> names of its INTERFACE targets
    for d in FOLDERS:
        path = os.path.join(root, d, 'CMakeLists.txt')
        if not os.path.exists(path):
            continue
        text = re.sub(r'#[^\n]*', '', open(path).read())
        for m in re.finditer(r'add_(?:library|executable)\((\w+)([^)]*)\)', text):
            name, args = m.group(1), m.group(2).split()
            if 'INTERFACE' in args:
                interface.setdefault(d, set()).add(name)
            targets[name] = dict(dir=d, sources=[a for a in args if a.endswith(('.cc', '.cu'))],
                                 public=set(), private=set())
        for m in re.finditer(r'target_link_libraries\((\w+)([^)]*)\)', text):
            name, mode = m.group(1), 'public'
            for tok in m.group(2).split():
                if tok in ('PUBLIC', 'INTERFACE'):
                    mode = 'public'
                elif tok == 'PRIVATE':
                    mode = 'private'
                elif name in targets:
                    targets[name][mode].add(tok)
    return targets, interface


def linked(targets, name):
    out, todo = {name}, list(targets[name]['public'] | targets[name]['private'])
    while todo:
        dep = todo.pop()
        if dep in out:
            continue
        out.add(dep)
        todo.extend(targets.get(dep, {}).get('public', ()))
    return out


def check_family_flags(root):
    """Reads of ModelConfig's family flags outside engine/model/ (see FAMILY_FLAGS); returns their count."""
    problems = 0
    for top in FLAG_FREE:
        for d, _, names in os.walk(os.path.join(root, top)):
            rel = os.path.relpath(d, root)
            if rel == 'engine/model' or rel.startswith('engine/model/'):
                continue
            for f in sorted(names):
                if not f.endswith(('.cc', '.h', '.cu', '.cuh')):
                    continue
                for n, line in enumerate(open(os.path.join(d, f)), 1):
                    code = line.split('//', 1)[0]
                    for m in FAMILY_FLAGS.finditer(code):
                        problems += 1
                        print(f'{rel}/{f}:{n}: reads the family flag {m.group(1)} of ModelConfig; '
                              'read the layer plan (engine/model/layer_plan.h) instead')
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    targets, interface = parse(root)
    owner, first = {}, {}
    for name, t in targets.items():
        first.setdefault(t['dir'], name)
        for src in t['sources']:
            stem = os.path.join(t['dir'], os.path.splitext(src)[0])
            owner[stem + '.h'] = owner[stem + '.cuh'] = name

    def owners(header):
        folder = os.path.dirname(header)
        found = set(interface.get(folder, ()))
        if header.startswith('proto/'):
            found.add('scored_proto')
        else:
            found.add(owner.get(header, first.get(folder, '?')))
        return found

    problems = 0
    for name, t in sorted(targets.items()):
        files = {os.path.join(t['dir'], s) for s in t['sources']}
        files |= {h for h, o in owner.items() if o == name}
        if first[t['dir']] == name:
            files |= {os.path.join(t['dir'], f) for f in os.listdir(os.path.join(root, t['dir']))
                      if f.endswith(('.h', '.cuh')) and os.path.join(t['dir'], f) not in owner}
        ok = linked(targets, name)
        for f in sorted(files):
            path = os.path.join(root, f)
            if not os.path.exists(path):
                continue
            for inc in INCLUDE.findall(open(path).read()):
                if not owners(inc) & ok:
                    problems += 1
                    print(f'{name}: {f} includes {inc} ({" or ".join(sorted(owners(inc)))}), which it does not link')
    for name, (kind, deps) in LINK_RULES.items():
        if name not in targets:
            continue
        ours = {d for d in linked(targets, name) if d.startswith('scored_') and d != name}
        bad = ours - deps if kind == 'only' else ours & deps
        for dep in sorted(bad):
            problems += 1
            print(f'{name}: links {dep}, which its layer must not (engine/README.md, Layers)')
    problems += check_family_flags(root)
    print(f'check_layers: {len(targets)} targets, {problems} problem(s)')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
