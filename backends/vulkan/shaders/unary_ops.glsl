// The unary ops of unary.comp and unary_f32.comp: apply(op, x, coordinates) for the op codes
// the backend's elementwise.rs writes into i[0].
#define UNARY_SQR 0
#define UNARY_SQRT 1
#define UNARY_NEG 2
#define UNARY_ABS 3
#define UNARY_EXP 4
#define UNARY_RELU 5
#define UNARY_GELU 6
#define UNARY_GELU_ERF 7
#define UNARY_SILU 8
#define UNARY_SIGMOID 9
#define UNARY_TANH 10
#define UNARY_SCALE 11
#define UNARY_DIAG_MASK_INF 12

// tanh without the overflow of exp(2x) for large |x|.
float tanh_safe(float x) {
    float e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
}

// erf to within 1.2e-7 (Numerical Recipes' erfc by Chebyshev fitting).
float erf_approx(float x) {
    float z = abs(x);
    float t = 1.0 / (1.0 + 0.5 * z);
    float r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
        t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
        t * (-0.82215223 + t * 0.17087277)))))))));
    return x >= 0.0 ? 1.0 - r : r - 1.0;
}

float apply(int op, float x, uvec4 c) {
    switch (op) {
    case UNARY_SQR: return x * x;
    case UNARY_SQRT: return sqrt(x);
    case UNARY_NEG: return -x;
    case UNARY_ABS: return abs(x);
    case UNARY_EXP: return exp(x);
    case UNARY_RELU: return max(x, 0.0);
    case UNARY_GELU: return 0.5 * x * (1.0 + tanh_safe(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case UNARY_GELU_ERF: return 0.5 * x * (1.0 + erf_approx(x * 0.7071067811865476));
    case UNARY_SILU: return x / (1.0 + exp(-x));
    case UNARY_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case UNARY_TANH: return tanh_safe(x);
    case UNARY_SCALE: return x * pc.args.f[0];
    case UNARY_DIAG_MASK_INF: return int(c.x) > pc.args.i[1] + int(c.y) ? uintBitsToFloat(0xff800000u) : x;
    }
    return x;
}
