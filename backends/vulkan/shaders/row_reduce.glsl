// Reductions over the invocations of a workgroup, for shaders that give each row of a tensor
// to one workgroup of ROW_THREADS invocations: each invocation folds the values i0 = t,
// t + ROW_THREADS, ... of the row, then the workgroup combines the partial results in shared
// memory by halving. Nothing depends on the subgroup size.
//
// Every invocation of the workgroup must call these, in uniform control flow.

#define ROW_THREADS 256u

layout(local_size_x = 256) in;

shared float row_partial[ROW_THREADS];

// The row that this workgroup handles, and its coordinates (i1, i2, i3) in a tensor of
// sizes `ne`.
uvec3 row_coords(uint row, uint ne[4]) {
    return uvec3(row % ne[1], (row / ne[1]) % ne[2], row / (ne[1] * ne[2]));
}

// Rows of a tensor of sizes `ne`.
uint row_count(uint ne[4]) {
    return ne[1] * ne[2] * ne[3];
}

// The sum of `v` over the workgroup, returned to every invocation.
float group_sum(float v) {
    uint t = gl_LocalInvocationID.x;
    row_partial[t] = v;
    barrier();
    for (uint half_n = ROW_THREADS / 2u; half_n > 0u; half_n >>= 1) {
        if (t < half_n) {
            row_partial[t] += row_partial[t + half_n];
        }
        barrier();
    }
    float r = row_partial[0];
    // Nobody writes the scratch again before everyone has read the result.
    barrier();
    return r;
}

// The largest `v` over the workgroup (the values must not be NaN), returned to every
// invocation.
float group_max(float v) {
    uint t = gl_LocalInvocationID.x;
    row_partial[t] = v;
    barrier();
    for (uint half_n = ROW_THREADS / 2u; half_n > 0u; half_n >>= 1) {
        if (t < half_n) {
            float other = row_partial[t + half_n];
            if (other > row_partial[t]) {
                row_partial[t] = other;
            }
        }
        barrier();
    }
    float r = row_partial[0];
    barrier();
    return r;
}
