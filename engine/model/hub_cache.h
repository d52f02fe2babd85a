// `--model org/name` (and `--reference_model`), as vLLM and transformers take it: a Hugging Face hub id
// resolved OFFLINE through the local hub cache, never downloaded. The cache is the folder huggingface_hub
// writes: $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub. A repository `org/name` lives in models--org--name/; `org/name@REV` picks the
// revision REV (a branch or tag under refs/, or a commit hash under snapshots/), default main. The model
// folder is that snapshot (its files are links into blobs/).
// A value that names an existing path is a path, whatever it looks like; so is one that is no hub id (more
// than one '/', or characters a repository name cannot hold).
// Thread-safety: a pure function of the file system and the environment.
#ifndef SCORED_ENGINE_MODEL_HUB_CACHE_H_
#define SCORED_ENGINE_MODEL_HUB_CACHE_H_

#include <string>

#include "absl/status/statusor.h"

namespace scored {

// The folder to load for `model`: `model` itself when it exists or is no hub id; the cached snapshot of a
// hub id; NOT_FOUND naming the cache folder looked in and how to fill it when the id is not cached.
absl::StatusOr<std::string> ResolveModelPath(const std::string& model);

// The hub cache folder this process would read (see above), whether or not it exists.
std::string HubCacheDir();

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_HUB_CACHE_H_
