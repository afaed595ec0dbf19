// Helpers every kernel may use. Arithmetic that must equal the CPU's bit
// for bit is written with `precise` (no contraction into fused
// multiply-adds, which the C code does not do either).

// IEEE binary16 bits -> float (exact; as rp_fp16_to_fp32)
float h2f(uint h) {
    return unpackHalf2x16(h).x;
}

// float -> IEEE binary16 bits, round to nearest even (as rp_fp32_to_fp16)
uint f2h(float f) {
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)
        return sign | 0x7c00u | (ax > 0x7f800000u ? (0x200u | ((ax >> 13) & 0x3ffu)) : 0u);
    if (ax >= 0x477ff000u) return sign | 0x7c00u;
    if (ax < 0x38800000u) {
        precise float v = uintBitsToFloat(ax) * 16777216.0;
        return sign | uint(roundEven(v));
    }
    uint e = (ax >> 23) - 112u;
    uint m = ax & 0x7fffffu;
    uint h = (e << 10) | (m >> 13);
    uint rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h++;
    return sign | h;
}

// round to nearest, ties to even, for |x| < 2^22, as rp_nearest_int does it
// (an IEEE addition; roundEven is not reliably ties-to-even on every driver)
int nearest_int(float x) {
    precise float t = x + 12582912.0;
    return int(floatBitsToUint(t) & 0x007fffffu) - 0x00400000;
}

// a float rounded to binary16 and back
float f16_round(float f) {
    return h2f(f2h(f));
}

// a / b correctly rounded to nearest even, as the CPU's division: a long
// division of the mantissas in integers (GLSL's `/` may be off by an ulp, and
// drivers may rewrite a residual correction away), for normal a and b with a
// normal quotient; anything else takes `/`.
float div_rn(float a, float b) {
    const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
    const int ea = int((ua >> 23) & 0xffu), eb = int((ub >> 23) & 0xffu);
    if (ea == 0 || ea == 255 || eb == 0 || eb == 255) return a / b;
    uint ma = (ua & 0x7fffffu) | 0x800000u, mb = (ub & 0x7fffffu) | 0x800000u;
    int e = ea - eb + 127;
    if (ma < mb) {
        ma <<= 1;
        e -= 1;
    }
    uint q = 0u, rem = ma; /* mb <= rem < 2 mb < 2^25 */
    for (int i = 0; i < 24; i++) {
        const bool bit = rem >= mb;
        if (bit) rem -= mb;
        q = (q << 1) | (bit ? 1u : 0u);
        rem <<= 1;
    }
    /* rem / mb is now twice what is left: the next bit and the rest */
    if (rem > mb || (rem == mb && (q & 1u) != 0u)) q++;
    if (q == 0x1000000u) {
        q >>= 1;
        e += 1;
    }
    if (e <= 0 || e >= 255) return a / b;
    return uintBitsToFloat(((ua ^ ub) & 0x80000000u) | (uint(e) << 23) | (q & 0x7fffffu));
}

// signed 8-bit lanes of a word
ivec4 i8x4(uint w) {
    return ivec4(bitfieldExtract(int(w), 0, 8), bitfieldExtract(int(w), 8, 8),
                 bitfieldExtract(int(w), 16, 8), bitfieldExtract(int(w), 24, 8));
}

int dot4(uint a, uint b) {
    ivec4 x = i8x4(a), y = i8x4(b);
    return x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
}

// tanh that stays finite for large arguments
float tanh_safe(float x) {
    return tanh(clamp(x, -15.0, 15.0));
}
