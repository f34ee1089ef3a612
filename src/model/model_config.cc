#include "model/model_config.h"

#include <cmath>

namespace icecache {

void ComputeRopeInvFreq(const ModelConfig& config, float* inv_freq) {
  const int half = config.head_dim / 2;
  const float base = config.rope_theta;
  for (int i = 0; i < half; ++i) {
    // transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in f32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(config.head_dim);
    inv_freq[i] = 1.0f / std::pow(base, exponent);
  }
  if (!config.rope_freq_factors.empty()) {
    for (int i = 0; i < half; ++i) inv_freq[i] /= config.rope_freq_factors[i];
  }
  const RopeScaling& s = config.rope_scaling;
  if (s.type == RopeScaling::Type::kLinear) {
    for (int i = 0; i < half; ++i) inv_freq[i] /= s.factor;
  } else if (s.type == RopeScaling::Type::kLlama3) {
    const float pi = 3.14159265358979323846f;
    const float low_freq_wavelen = static_cast<float>(s.original_max_position) / s.low_freq_factor;
    const float high_freq_wavelen =
        static_cast<float>(s.original_max_position) / s.high_freq_factor;
    for (int i = 0; i < half; ++i) {
      const float f = inv_freq[i];
      const float wavelen = 2.0f * pi / f;
      if (wavelen > low_freq_wavelen) {
        inv_freq[i] = f / s.factor;
      } else if (wavelen >= high_freq_wavelen) {
        const float smooth =
            (static_cast<float>(s.original_max_position) / wavelen - s.low_freq_factor) /
            (s.high_freq_factor - s.low_freq_factor);
        inv_freq[i] = (1.0f - smooth) * f / s.factor + smooth * f;
      }
    }
  }
}

}  // namespace icecache
