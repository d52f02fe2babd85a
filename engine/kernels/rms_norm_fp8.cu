// (being written) Contract: rms_norm_fp8.h.
#include "engine/kernels/rms_norm_fp8.h"
