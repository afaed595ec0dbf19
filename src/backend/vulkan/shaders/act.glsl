// Reading the encoded activations of one token (quant.comp's layout) from
// xa[] at word offset xo; u is a unit of 32 (ne0 the row length).
float act_d(uint xo, uint u, uint ne0) {
#ifdef ACT_Q8_K
    return uintBitsToFloat(xa[xo + ne0 / 4u + u / 8u]);
#else
    return uintBitsToFloat(xa[xo + ne0 / 4u + u]);
#endif
}
#ifdef ACT_Q8_1
float act_s(uint xo, uint u, uint ne0) {
    return uintBitsToFloat(xa[xo + ne0 / 4u + ne0 / 32u + u]);
}
#endif
#ifdef ACT_Q8_K
int act_bsum(uint xo, uint u, uint half_, uint ne0) { // sum of quants 16 * (2u + half_) ..
    return int(xa[xo + ne0 / 4u + ne0 / 256u + 2u * u + half_]);
}
#endif
