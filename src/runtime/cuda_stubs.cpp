// CUDA entry points of a build without the CUDA backend (see runtime/cuda_hooks.h).
#ifndef KILN_HAVE_CUDA
#include "runtime/cuda_hooks.h"

namespace kiln {

namespace {
Status no_cuda() { return unsupported("this build of kiln has no CUDA backend (configure with the CUDA toolkit present)"); }
}  // namespace

bool cuda_compiled() { return false; }
Status cuda_device_status() { return no_cuda(); }
std::string cuda_library_versions() { return ""; }
Status cuda_setup(ContextImpl&) { return no_cuda(); }
Status cuda_execute(ContextImpl&, void*, bool) { return no_cuda(); }
Status cuda_upload_inputs(ContextImpl&, const std::map<std::string, Tensor>&) { return no_cuda(); }
Result<Tensor> cuda_download(ContextImpl&, const std::string&) { return no_cuda(); }
Status cuda_attach_kernels(ContextImpl&, Graph&) { return no_cuda(); }
void cuda_set_graphs(ContextImpl&, bool) {}
double cuda_last_gpu_ms(const ContextImpl&) { return -1; }
bool cuda_uses_graph(const ContextImpl&) { return false; }
int cuda_fallback_layers(const ContextImpl&) { return 0; }
void cuda_release_device_memory(ContextImpl&) {}
Status cuda_copy(void*, const void*, size_t, void*) { return no_cuda(); }
Status cuda_wait(void*) { return no_cuda(); }

}  // namespace kiln
#endif
