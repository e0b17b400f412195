"""Small random mixture-of-experts models of transformers (Qwen3-MoE, Mixtral) for the MoE tests."""
import torch
import transformers


def tiny(kind: str, seed: int = 0):
    torch.manual_seed(seed)
    common = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  vocab_size=128, max_position_embeddings=64, num_experts_per_tok=2)
    if kind == "qwen3_moe":
        config = transformers.Qwen3MoeConfig(**common, num_experts=8, moe_intermediate_size=32, intermediate_size=96,
                                             decoder_sparse_step=1, norm_topk_prob=True)
        model = transformers.Qwen3MoeForCausalLM(config)
    else:
        config = transformers.MixtralConfig(**common, num_local_experts=4, intermediate_size=48)
        model = transformers.MixtralForCausalLM(config)
    with torch.no_grad():  # random experts of a realistic spread (the initializer leaves some at zero)
        for module in model.modules():
            if hasattr(module, "gate_up_proj") and hasattr(module, "act_fn"):
                module.gate_up_proj.normal_(0, 0.1)
                module.down_proj.normal_(0, 0.1)
    return model.eval()
