#!/usr/bin/env python3
"""Writes dequant_golden.inc: known-answer cases for LinearWeight::DequantizeRows.

Pure Python (no numpy/torch), an implementation independent of the C++ one: packing is written as a
bit stream, fp16 rounding uses struct's IEEE half ('e', round half to even), bf16 rounding is done on
float32 bit patterns, FP8 E4M3FN and E2M1 are decoded from their definitions. Order of operations is
compressed-tensors' (see DESIGN.md §6): products of (q - zp) or an FP8 value and a bf16/fp16/fp32 scale
are exact in float32 and kept unrounded (the decode contract of LinearWeight::DequantizeRows); nvfp4
divides the fp8 scale by the global scale in fp32, multiplies in fp32, then rounds to bf16.

Run: python3 gen_dequant_golden.py > dequant_golden.inc
"""
import random
import struct

rng = random.Random(20261122)


def f32(x):
    return struct.unpack('<f', struct.pack('<f', x))[0]


def f32_bits(x):
    return struct.unpack('<I', struct.pack('<f', x))[0]


def bf16_bits(x):  # x exactly representable in float32
    u = f32_bits(x)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def bf16_val(bits):
    return struct.unpack('<f', struct.pack('<I', bits << 16))[0]


def fp16_bits(x):
    return struct.unpack('<H', struct.pack('<e', x))[0]


def fp16_val(bits):
    return struct.unpack('<e', struct.pack('<H', bits))[0]


def exact_f32(x, dtype):
    """The product as float32; for bf16/fp16 scales it must be exact (asserted)."""
    if dtype != 'F32':
        assert f32(x) == x, x
    return f32(x)


def scale_bits(v, dtype):
    if dtype == 'BF16':
        return bf16_bits(f32(v))
    if dtype == 'F16':
        return fp16_bits(v)
    return f32_bits(v)


def scale_val(bits, dtype):
    if dtype == 'BF16':
        return bf16_val(bits)
    if dtype == 'F16':
        return fp16_val(bits)
    return struct.unpack('<f', struct.pack('<I', bits))[0]


def fp8_val(b):
    s = -1.0 if b & 0x80 else 1.0
    e = (b >> 3) & 0xF
    m = b & 7
    assert not (e == 15 and m == 7)
    if e == 0:
        return s * m * 2.0 ** -9
    return s * (1 + m / 8) * 2.0 ** (e - 7)


def e2m1_val(n):
    mag = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0][n & 7]
    return -mag if n & 8 else mag


def pack_stream(values, bits):
    """Unsigned fields at bit i*bits of a little-endian int32 stream."""
    nwords = (len(values) * bits + 31) // 32
    acc = 0
    for i, v in enumerate(values):
        assert 0 <= v < (1 << bits)
        acc |= v << (i * bits)
    return [(acc >> (32 * w)) & 0xFFFFFFFF for w in range(nwords)]


def emit(name, kind, values, fmt):
    print(f'const {kind} {name}[] = {{' + ', '.join(fmt(v) for v in values) + '};')


def hex32(v):
    return f'0x{v:08x}u'


def hex16(v):
    return f'0x{v:04x}'


def emit_scales(name, bits, dtype):
    if dtype == 'F32':
        emit(name, 'uint32_t', bits, hex32)
    else:
        emit(name, 'uint16_t', bits, hex16)


def pack_case(name, out, inn, bits, strategy, group, symmetric, dtype, actorder=False):
    off = 1 << (bits - 1)
    q = [[rng.randrange(-off, off) for _ in range(inn)] for _ in range(out)]
    if strategy == 'group':
        ngroups = (inn + group - 1) // group
        if actorder:
            g_idx = [(k * 7 + 3) % ngroups for k in range(inn)]
        else:
            g_idx = [k // group for k in range(inn)]
    else:
        ngroups = 1
        g_idx = [0] * inn
    nscale_rows = 1 if strategy == 'tensor' else out
    scales = [[scale_bits(rng.uniform(0.001, 0.3) * rng.choice([1, -1]), dtype) for _ in range(ngroups)]
              for _ in range(nscale_rows)]
    zp = [[0 if symmetric else rng.randrange(-off, off) for _ in range(ngroups)] for _ in range(out)]
    packed = []
    for o in range(out):
        packed += pack_stream([v + off for v in q[o]], bits)
    zp_words = []
    if not symmetric:
        cols = [pack_stream([zp[o][g] + off for o in range(out)], bits) for g in range(ngroups)]
        nwords = len(cols[0])
        for w in range(nwords):  # [ceil(out*bits/32), ngroups], row-major
            for g in range(ngroups):
                zp_words.append(cols[g][w])
    expect = []
    for o in range(out):
        for k in range(inn):
            g = g_idx[k]
            s = scale_val(scales[0 if strategy == 'tensor' else o][g], dtype)
            expect.append(f32_bits(exact_f32((q[o][k] - zp[o][g]) * s, dtype)))
    print(f'// {name}: pack-quantized int{bits} {strategy} group={group} '
          f'{"sym" if symmetric else "asym"} scale {dtype}{" actorder" if actorder else ""}')
    emit(f'{name}_packed', 'uint32_t', packed, hex32)
    emit_scales(f'{name}_scale', [b for row in scales for b in row], dtype)
    if not symmetric:
        emit(f'{name}_zp', 'uint32_t', zp_words, hex32)
    if actorder:
        emit(f'{name}_g_idx', 'int32_t', g_idx, str)
    emit(f'{name}_expect', 'uint32_t', expect, hex32)


def naive_case(name, out, inn, strategy, group, symmetric, dtype):
    q = [[rng.randrange(-128, 128) for _ in range(inn)] for _ in range(out)]
    ngroups = inn // group if strategy == 'group' else 1
    scales = [[scale_bits(rng.uniform(0.0005, 0.02), dtype) for _ in range(ngroups)] for _ in range(out)]
    zp = [[0 if symmetric else rng.randrange(-128, 128) for _ in range(ngroups)] for _ in range(out)]
    expect = []
    for o in range(out):
        for k in range(inn):
            g = k // group if strategy == 'group' else 0
            expect.append(f32_bits(exact_f32((q[o][k] - zp[o][g]) * scale_val(scales[o][g], dtype), dtype)))
    print(f'// {name}: naive-quantized int8 {strategy} {"sym" if symmetric else "asym"} scale {dtype}')
    emit(f'{name}_weight', 'int8_t', [v for row in q for v in row], str)
    emit_scales(f'{name}_scale', [b for row in scales for b in row], dtype)
    if not symmetric:
        emit(f'{name}_zp', 'int8_t', [v for row in zp for v in row], str)
    emit(f'{name}_expect', 'uint32_t', expect, hex32)


def random_fp8():
    while True:
        b = rng.randrange(256)
        if (b & 0x7F) != 0x7F:
            return b


def fp8_case(name, out, inn, strategy, block, dtype):
    w = [[random_fp8() for _ in range(inn)] for _ in range(out)]
    if strategy == 'tensor':
        srows, scols = 1, 1
    elif strategy == 'channel':
        srows, scols = out, 1
    else:
        srows, scols = (out + block[0] - 1) // block[0], (inn + block[1] - 1) // block[1]
    scales = [[scale_bits(rng.uniform(0.0001, 0.01), dtype) for _ in range(scols)] for _ in range(srows)]
    expect = []
    for o in range(out):
        for k in range(inn):
            if strategy == 'tensor':
                s = scales[0][0]
            elif strategy == 'channel':
                s = scales[o][0]
            else:
                s = scales[o // block[0]][k // block[1]]
            expect.append(f32_bits(exact_f32(fp8_val(w[o][k]) * scale_val(s, dtype), dtype)))
    print(f'// {name}: float-quantized fp8 {strategy} {block} scale {dtype}')
    emit(f'{name}_weight', 'uint8_t', [v for row in w for v in row], hex)
    emit_scales(f'{name}_scale', [b for row in scales for b in row], dtype)
    emit(f'{name}_expect', 'uint32_t', expect, hex32)


def nvfp4_case(name, out, inn, global_scale):
    nib = [[rng.randrange(16) for _ in range(inn)] for _ in range(out)]
    scales = [[random_fp8() & 0x7F for _ in range(inn // 16)] for _ in range(out)]  # positive scales
    packed = []
    for o in range(out):
        for i in range(0, inn, 2):
            packed.append(nib[o][i] | (nib[o][i + 1] << 4))
    gs = f32(global_scale)
    expect = []
    for o in range(out):
        for k in range(inn):
            s = f32(fp8_val(scales[o][k // 16]) / gs)  # fp32 division (double rounding is innocuous)
            w = f32(e2m1_val(nib[o][k]) * s)           # fp32 multiply
            expect.append(bf16_bits(w) << 16)           # rounded to bf16, widened
    print(f'// {name}: nvfp4-pack-quantized, global scale {gs!r}')
    emit(f'{name}_packed', 'uint8_t', packed, hex)
    emit(f'{name}_scale', 'uint8_t', [b for row in scales for b in row], hex)
    emit(f'{name}_global', 'uint32_t', [f32_bits(gs)], hex32)
    emit(f'{name}_expect', 'uint32_t', expect, hex32)


print('// Generated by gen_dequant_golden.py; do not edit.')
pack_case('pack_i4_group_sym_bf16', 3, 32, 4, 'group', 16, True, 'BF16')
pack_case('pack_i4_channel_asym_f16', 9, 16, 4, 'channel', 0, False, 'F16')
pack_case('pack_i4_group_asym_actorder_bf16', 9, 32, 4, 'group', 8, False, 'BF16', actorder=True)
pack_case('pack_i8_channel_sym_bf16', 2, 8, 8, 'channel', 0, True, 'BF16')
pack_case('pack_i8_tensor_sym_f32', 2, 8, 8, 'tensor', 0, True, 'F32')
pack_case('pack_i3_group_asym_bf16', 12, 32, 3, 'group', 16, False, 'BF16')
naive_case('naive_i8_channel_asym_bf16', 3, 8, 'channel', 0, False, 'BF16')
naive_case('naive_i8_group_sym_f16', 2, 16, 'group', 8, True, 'F16')
fp8_case('fp8_tensor_bf16', 2, 8, 'tensor', None, 'BF16')
fp8_case('fp8_channel_bf16', 3, 8, 'channel', None, 'BF16')
fp8_case('fp8_block_f32', 5, 6, 'block', (2, 4), 'F32')
fp8_case('fp8_block_bf16', 3, 5, 'block', (2, 2), 'BF16')
nvfp4_case('nvfp4', 3, 32, 448.0 * 6.0 / 0.37)
