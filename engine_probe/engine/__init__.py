"""A real continuous-batching LLM engine in torch: paged KV cache, prefix caching, chunked
prefill, preemption that resumes. ``hooks`` defines how observers see its step loop."""
