# ---
# jupyter:
#   kernelspec: {display_name: Python 3, language: python, name: python3}
#   course: {profile: BASE-CPU}
# ---

# %% [markdown]
# # 第 3a 课　CISPO、追踪实验与检查题
#
# ## 导读
#
# 第 2 课把 GRPO 的目标拆成了几块：新旧策略的逐词元（token）概率比、双侧裁剪、参考策略 KL、回答掩码，
# 以及“每条回答等权”的归约。本课在这套部件上回答一个问题：**CISPO 改了什么？**
#
# MiniMind 的 `train_grpo.py` 用一个 `loss_type` 开关在 GRPO 与 CISPO 之间切换。两者共享采样、奖励、组内优势、
# 掩码、概率比和 KL，只有“策略项”的写法不同。你会亲手写出这两个损失，画出 **GRPO 的梯度在哪里变成 0、
# CISPO 的梯度为什么还在**，再跑一遍 MiniMind 第 24 课的追踪实验，最后做 8 道检查题。
# 损失家族（TRL 的 `loss_type`）、GSPO 和与 TRL 的一致性核对在第 3b 课（`nb03b_loss_family_trl`）。
#
# 本课要你实现的函数（名字和签名固定，自动评分与第 3b 课都依赖它们）：
#
# | TODO | 函数 | 作用 |
# | --- | --- | --- |
# | 1 | `grpo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon=0.2, beta=0.0, ref_logps=None)` | MiniMind 的 GRPO 策略损失（标量） |
# | 2 | `cispo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon_high=5.0, beta=0.0, ref_logps=None)` | MiniMind 的 CISPO 策略损失（标量） |
#
# 另外还有一道“梯度在哪里消失”的计算题和 8 道检查题（来自 MiniMind 第 24 课的检查清单）。
#
# 完成标准：每个 TODO 下面的可见测试通过；提交后隐藏测试用随机输入、float32/float64、变长掩码、
# 被掩码位置上的极端数值和梯度再核对一遍。
#
# 本课用到的术语：**词元**（token）；**候选 / 回答**（completion）：同一个提示采样出的一条输出；
# **参考策略**（reference，冻结的 SFT 模型，KL 项以它为锚）。

# %% [markdown]
# ## 运行环境
#
# - 本课使用 **BASE-CPU** 配置（`torch`、`matplotlib`），不需要 GPU，也不下载模型。
# - 运行时间：`make bench` 在一台**空闲**的 2 核机器上测本课（不含内核启动）；机器忙时（多个进程抢 CPU）
#   可能慢几倍。本课最后一个代码单元会打印**这一次**从头运行到那里的实测秒数，以它为准。
# - 笔记本最上方的启动单元会打印当前环境的检查表；如果表里有红色项，先按提示修好再往下做。
# - 掩码、`beta`、ε、名称等约定见课程的[约定卡](../../docs/CONVENTIONS.md)（C1–C6）与术语表。

# %% [markdown]
# ## 前置阅读
#
# - 第 1 课（组内相对优势）和第 2 课（概率比、裁剪、参考策略 KL、掩码、回答等权）。本课直接沿用它们的符号，
#   并从 `tools/lessons/` 导入这两课评分过的函数（`group_relative_advantages`、`token_kl_penalty`），不再另抄一份。
# - MiniMind `trainer/train_grpo.py` 的损失部分：`loss_type == "cispo"` 时用截断并 `detach()` 的概率比乘以
#   优势和对数概率；否则用 PPO 式的裁剪概率比；最后先按回答求有效词元均值，再对回答求均值。
# - 论文（可选）：CISPO 出自 MiniMax-M1（arXiv 2506.13585），`ε_max = 5.0` 的推荐值见 ScaleRL（arXiv 2510.13786）。
# - 课程约定卡（`docs/CONVENTIONS.md`）：掩码可以是 bool 或 0/1（C1）；`beta > 0` 必须给参考策略的对数概率（C2）；
#   被掩码的位置不影响损失和梯度（C3）。

# %% [markdown]
# ## 第 1 步　符号与共享部件
#
# 记 `B` 为一个批次里的提示数，`G = num_generations` 为每个提示采样的回答数，`T` 为回答的最大词元数。
# MiniMind 和 TRL 都把同一个提示的 `G` 条回答**连续**排在平铺的第 0 维上（第 `i` 个提示的第 `j` 条回答
# 在下标 `i*G + j`），所以：
#
# | 张量 | 形状 | 含义 |
# | --- | --- | --- |
# | `rewards` | `[B*G]` | 每条回答一个标量奖励 |
# | `grouped_rewards` | `[B, G]` | `rewards.view(-1, G)`：一行是一个提示的一组回答 |
# | `advantages` | `[B*G]` | 组内相对优势（序列级，一条回答一个数） |
# | `policy_logps` / `old_logps` / `ref_logps` | `[B*G, T]` | 当前策略 / 采样时的旧策略 / 冻结参考策略的逐词元对数概率 |
# | `completion_mask` | `[B*G, T]` | 有效回答词元（含第一个 EOS）为 1/True，其余为 0/False |
# | `per_token_loss` | `[B*G, T]` | 归约之前的逐词元损失 |
#
# 公式里用 `ℓ^θ_{i,t}`、`ℓ^old_{i,t}`、`ℓ^ref_{i,t}` 分别表示 `policy_logps`、`old_logps`、`ref_logps` 的第 `(i, t)` 个元素，
# `A_i` 是 `advantages[i]`，`m_{i,t}` 是 `completion_mask[i, t]`。
#
# 下面的单元给出**只读**的共享部件（不评分，直接使用）：
#
# - `token_kl_penalty`：第 2 课评分过的非负 KL 估计 `exp(Δ) − Δ − 1`，`Δ = ref − policy`（从 `tools.lessons.nb02_grpo_objective` 导入）；
# - `group_relative_advantages`：第 1 课评分过的 MiniMind 平铺写法 `(R − mean) / (std + eps)`，`std` 是总体标准差，
#   `eps = 1e-4`（从 `tools.lessons.nb01_group_advantages` 导入）；
# - `check_policy_inputs`：检查形状、掩码取值、`beta` 与 `ref_logps` 等输入契约，违反时抛出带中文说明的
#   `ValueError`；通过时**返回 bool 形式的掩码**。你的函数应当先调用它。

# %% nbgrader={"locked": true, "grade_id": "shared_helpers"}
#@save
import math

import torch

from tools.lessons.nb01_group_advantages import group_relative_advantages
from tools.lessons.nb02_grpo_objective import token_kl_penalty


def completion_bool_mask(completion_mask, shape, name="completion_mask"):
    """The mask as a bool tensor; a bool mask or a 0/1 mask of any real dtype is accepted (C1), else ValueError."""
    if not torch.is_tensor(completion_mask) or tuple(completion_mask.shape) != tuple(shape):
        got = tuple(completion_mask.shape) if torch.is_tensor(completion_mask) else type(completion_mask).__name__
        raise ValueError(f"{name} 的形状必须是 {tuple(shape)}，实际为 {got}")
    if completion_mask.dtype == torch.bool:
        return completion_mask
    if completion_mask.is_complex():  # every other dtype (integer, floating) is real
        raise ValueError(f"{name} 必须是 bool 或实数 dtype 的 0/1 张量，实际 dtype 为 {completion_mask.dtype}")
    ones = completion_mask == 1
    if not bool((ones | (completion_mask == 0)).all()):
        raise ValueError(f"{name} 只能取 0 或 1（或 True/False），发现了其他值")
    return ones


def check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=0.0, ref_logps=None):
    """Raise ValueError (Chinese message) when the tensors break the losses' input contract; return the bool mask."""
    if not (torch.is_tensor(policy_logps) and policy_logps.dim() == 2 and policy_logps.is_floating_point()):
        raise ValueError("policy_logps 必须是形状为 [B*G, T] 的二维浮点张量")
    shape = tuple(policy_logps.shape)
    if not torch.is_tensor(old_logps) or tuple(old_logps.shape) != shape:
        got = tuple(old_logps.shape) if torch.is_tensor(old_logps) else type(old_logps).__name__
        raise ValueError(f"old_logps 的形状必须与 policy_logps 相同 {shape}，实际为 {got}")
    valid = completion_bool_mask(completion_mask, shape)
    if not (torch.is_tensor(advantages) and advantages.dim() == 1 and advantages.shape[0] == shape[0]):
        got = tuple(advantages.shape) if torch.is_tensor(advantages) else type(advantages).__name__
        raise ValueError(f"advantages 必须是长度为 B*G={shape[0]} 的一维张量（每条回答一个优势），实际为 {got}")
    if not beta >= 0:
        raise ValueError(f"beta 必须 >= 0，实际为 {beta}")
    if beta > 0:
        if ref_logps is None:
            raise ValueError("beta > 0 时必须给出 ref_logps（参考策略的逐词元对数概率）")
        if not torch.is_tensor(ref_logps) or tuple(ref_logps.shape) != shape:
            got = tuple(ref_logps.shape) if torch.is_tensor(ref_logps) else type(ref_logps).__name__
            raise ValueError(f"ref_logps 的形状必须与 policy_logps 相同 {shape}，实际为 {got}")
    return valid  # [B*G, T] bool

# %% nbgrader={"locked": true, "grade_id": "display_helpers"}
import time

import matplotlib.pyplot as plt
from tools.notebook_runtime import show_figure  # PNG in the notebook whatever the backend

LESSON_STARTED = time.perf_counter()  # the last code cell prints how long this run took
torch.set_printoptions(precision=4, sci_mode=False)
plt.rcParams["axes.unicode_minus"] = False


_demo_mask = completion_bool_mask(torch.tensor([[1.0, 1.0, 0.0]]), (1, 3))
print("共享部件已就绪：token_kl_penalty, group_relative_advantages, check_policy_inputs；0/1 mask -> bool:", _demo_mask.tolist())

# %% [markdown]
# ## 第 2 步　GRPO 的策略项（TODO 1）
#
# MiniMind 的 GRPO 分支就是 PPO 的裁剪目标，只是优势换成了组内相对优势、并且没有 value loss。对第 `i` 条回答的
# 第 `t` 个词元：
#
# $$
# r_{i,t} = \exp(\ell^{\theta}_{i,t} - \ell^{\text{old}}_{i,t}),\qquad
# \text{per\_token\_loss}_{i,t} = -\Big(\min\big(r_{i,t}A_i,\ \operatorname{clip}(r_{i,t}, 1-\varepsilon, 1+\varepsilon)A_i\big) - \beta\,\mathrm{KL}_{i,t}\Big)
# $$
#
# 归约（MiniMind 与 TRL 的 `loss_type="grpo"` 相同）：先在每条回答的有效词元上求均值（有效词元数按
# `clamp(min=1)` 处理，全被掩码挡掉的回答贡献 0），再对 `B*G` 条回答求均值：
#
# $$
# \mathcal{L} = \frac{1}{B G}\sum_{i}\frac{\sum_t m_{i,t}\,\text{per\_token\_loss}_{i,t}}{\max(1, \sum_t m_{i,t})}
# $$
#
# 提示：
# - 先 `valid = check_policy_inputs(...)`（它返回布尔掩码）；再检查 `0 <= epsilon < 1`，否则抛出中文 `ValueError`。
# - **先掩码、再 `exp`**（约定 C3）：padding 位置可能装着任意有限值（比如对数概率比 800）。如果先算
#   `exp(policy − old)` 再乘掩码，`exp(800)` 是 `inf`，前向里 `inf × 0` 已是 NaN；即使用 `torch.where` 把损失挡住，
#   反向传播时 `0 × inf` 仍会在梯度里留下 NaN。所以先把被掩码位置的对数概率比置 0：
#   `log_ratio = torch.where(valid, policy_logps - old_logps, 0.0)`，再 `exp`；KL 的两个输入也一样先掩码。
# - `old_logps` 是采样那一刻记下的数，对这次更新来说是常数，不是要优化的东西（第 2 课第 1 步：旧策略是数据）。
#   所以用 `old_logps.detach()` 参与计算：调用方传进来的旧对数概率哪怕还挂在计算图上，梯度也只流向 `policy_logps`；
#   忘了这一步，而旧值又恰好和 `policy_logps` 来自同一次前向时，概率比恒为 1、梯度恒为 0。
# - `advantages` 是 `[B*G]`，用 `advantages.unsqueeze(1)` 广播到 `[B*G, T]`。
# - 只在 `beta != 0` 时加 KL 项（`beta = 0` 时可以不给 `ref_logps`，给了也忽略）。

# %% nbgrader={"solution": true, "grade_id": "grpo_policy_loss"}
#@save
def grpo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon=0.2, beta=0.0, ref_logps=None):
    """GRPO 策略损失（MiniMind 的 loss_type="grpo"）。

    参数：
        policy_logps:    [B*G, T] 当前策略的逐词元对数概率（需要梯度）
        old_logps:       [B*G, T] 采样时旧策略的逐词元对数概率
        advantages:      [B*G]    每条回答的组内相对优势
        completion_mask: [B*G, T] 有效词元为 1/True（bool 或任意实数 dtype 的 0/1）
        epsilon:         裁剪半径 ε，要求 0 <= ε < 1
        beta:            参考策略 KL 系数 β >= 0
        ref_logps:       [B*G, T] 参考策略的对数概率；beta > 0 时必须给出
    返回：
        标量张量：每条回答的有效词元均值（词元数至少按 1 计），再对回答求均值。
        被 mask 的位置不影响损失和梯度（先 mask 再 exp）。
    违反输入契约（形状、mask 取值、epsilon、beta、ref_logps）时抛出 ValueError。
    """
    ### BEGIN SOLUTION
    valid = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"epsilon 必须满足 0 <= epsilon < 1，实际为 {epsilon}")
    zero = torch.zeros_like(policy_logps)  # [B*G, T]
    log_ratio = torch.where(valid, policy_logps - old_logps.detach(), zero)  # [B*G, T] masked before exp (C3)
    ratio = torch.exp(log_ratio)  # [B*G, T]
    clipped_ratio = torch.clamp(ratio, 1.0 - epsilon, 1.0 + epsilon)  # [B*G, T]
    adv = advantages.to(ratio.dtype).unsqueeze(1)  # [B*G, 1]
    per_token_loss = -torch.minimum(ratio * adv, clipped_ratio * adv)  # [B*G, T]
    if beta != 0.0:
        safe_policy = torch.where(valid, policy_logps, zero)  # [B*G, T]
        safe_ref = torch.where(valid, ref_logps.to(policy_logps.dtype), zero)  # [B*G, T]
        per_token_loss = per_token_loss + beta * token_kl_penalty(safe_policy, safe_ref)  # [B*G, T]
    mask = valid.to(per_token_loss.dtype)  # [B*G, T]
    per_sequence = (per_token_loss * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # [B*G]
    return per_sequence.mean()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_grpo_policy_loss", "points": 4}
"""检查 grpo_policy_loss：手算的裁剪案例、按回答等权的归约、KL 项、全 mask 行、padding 上的极端值、梯度与输入契约（可见测试）。"""
from tools.grading import assert_close, expect_value_error

# 比率 [1.5, 0.5, 1.1]（相对 old=0），ε=0.2。第 0 条回答 A=+1（3 个有效词元），第 1 条 A=-1（前 2 个有效）。
_ratios = torch.tensor([[1.5, 0.5, 1.1], [1.5, 0.5, 1.1]], dtype=torch.float64)
_policy = torch.log(_ratios).requires_grad_(True)
_old = torch.zeros(2, 3, dtype=torch.float64)
_adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
_mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
_loss = grpo_policy_loss(_policy, _old, _adv, _mask, epsilon=0.2)
# A=+1: min(r, clip(r)) = [1.2, 0.5, 1.1]；A=-1: min(-r, -clip(r)) = [-1.5, -0.8]
_expected = (-(1.2 + 0.5 + 1.1) / 3 + (1.5 + 0.8) / 2) / 2
assert_close(_loss, torch.tensor(_expected, dtype=torch.float64), what="GRPO 损失（先回答内均值，再回答间均值）")
_loss.backward()
# 被裁剪的分支梯度为 0；未裁剪的词元对 log π 的梯度是 -A·r /（回答词元数 × 回答条数）
_expected_grad = torch.tensor([[0.0, -0.5 / 6, -1.1 / 6], [1.5 / 4, 0.0, 0.0]], dtype=torch.float64)
assert_close(_policy.grad, _expected_grad, what="GRPO 损失对 policy_logps 的梯度")

# bool mask 与 0/1 浮点 mask 给出相同结果（C1）
assert_close(grpo_policy_loss(_policy.detach(), _old, _adv, _mask.bool()), _loss.detach(), what="bool mask 的 GRPO 损失")
assert_close(grpo_policy_loss(_policy.detach(), _old, _adv, _mask.float()), _loss.detach(), what="0/1 浮点 mask 的 GRPO 损失")

# KL 项：policy 与参考策略相同时 KL=0；不同时按 +beta*KL 进入损失
_ref = _policy.detach() - 0.3
_with_kl = grpo_policy_loss(_policy.detach(), _old, _adv, _mask, epsilon=0.2, beta=0.1, ref_logps=_ref)
_kl = math.exp(-0.3) + 0.3 - 1.0
assert_close(_with_kl, torch.tensor(_expected + 0.1 * _kl, dtype=torch.float64), what="带 KL 的 GRPO 损失")

# 全被 mask 掉的回答贡献 0，但仍计入回答条数
_mask_empty = torch.tensor([[1, 1, 1], [0, 0, 0]])
_loss_empty = grpo_policy_loss(_policy.detach(), _old, _adv, _mask_empty, epsilon=0.2)
assert_close(_loss_empty, torch.tensor(-(1.2 + 0.5 + 1.1) / 3 / 2, dtype=torch.float64), what="含全 mask 行的 GRPO 损失")

# padding 位置放一个极端的对数比率（800）和极端的参考对数概率：损失与梯度都必须有限且不变（先 mask 再 exp）
_policy_big = _policy.detach().clone()
_policy_big[1, 2] = 800.0
_ref_big = _ref.clone()
_ref_big[1, 2] = -800.0
_leaf_big = _policy_big.clone().requires_grad_(True)
_loss_big = grpo_policy_loss(_leaf_big, _old, _adv, _mask, epsilon=0.2, beta=0.1, ref_logps=_ref_big)
_leaf_ok = _policy.detach().clone().requires_grad_(True)
_loss_ok = grpo_policy_loss(_leaf_ok, _old, _adv, _mask, epsilon=0.2, beta=0.1, ref_logps=_ref)
assert_close(_loss_big, _loss_ok.detach(), what="padding 上是 800 时的 GRPO 损失（应与正常输入相同，且有限）")
_loss_big.backward()
_loss_ok.backward()
assert_close(_leaf_big.grad, _leaf_ok.grad, what="padding 上是 800 时的梯度（出现 nan 说明先 exp 后 mask 了）")

expect_value_error(lambda: grpo_policy_loss(_policy, _old[:, :2], _adv, _mask), "old_logps 形状不一致")
expect_value_error(lambda: grpo_policy_loss(_policy, _old, _adv[:1], _mask), "advantages 长度不是 B*G")
expect_value_error(lambda: grpo_policy_loss(_policy, _old, _adv, _mask, epsilon=1.5), "epsilon 不在 [0, 1)")
expect_value_error(lambda: grpo_policy_loss(_policy, _old, _adv, _mask, beta=0.1), "beta > 0 但没有 ref_logps")
expect_value_error(lambda: grpo_policy_loss(_policy, _old, _adv, _mask * 2), "mask 里出现了 2")
print("grpo_policy_loss 可见测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb03a_cispo_trace_lab", "test_grpo_policy_loss", globals())
### END HIDDEN TESTS

# %% [markdown]
# ## 第 3 步　CISPO 改了什么（TODO 2）
#
# GRPO 的 `min(r·A, clip(r)·A)` 有一个副作用：当概率比越过裁剪边界、而且 `min` 选中了裁剪分支时，这个词元的
# 损失变成常数 `clip(r)·A`，**对参数的梯度整个消失**——这个词元在本次更新里不再有任何作用。
# CISPO（MiniMax-M1）换了一种写法：裁剪的是**重要性权重**本身，并把它当作常数（`detach`），梯度只走
# `log π`：
#
# $$
# \text{per\_token\_loss}_{i,t} = -\Big(\operatorname{sg}\big(\min(r_{i,t}, \varepsilon_{\text{high}})\big)\,A_i\,\ell^{\theta}_{i,t} - \beta\,\mathrm{KL}_{i,t}\Big)
# $$
#
# 其中 `sg` 是 stop-gradient（`.detach()`）。于是 `∂ per_token_loss / ∂ ℓ^θ = −min(r, ε_high)·A`：权重被截断，
# 但**永远不为 0**（除非 A=0）。归约和 GRPO 一样（MiniMind：先回答内均值，再回答间均值）。
#
# **这是谁的记号、谁的默认值。** 本课的 `cispo_policy_loss` 沿用 **MiniMind 的记号**：`epsilon_high` 是概率比的
# **绝对上限**，即 `torch.clamp(ratio, max=epsilon_high)`（MiniMind `train_grpo.py` 里的 `args.epsilon_high`）。
# 默认值 `epsilon_high = 5.0` 是**本课函数的默认值**，取自 ScaleRL 推荐的 `ε_max = 5.0`。TRL 1.16 的 `loss_type="cispo"`
# 也用绝对上限 `clamp(coef_1, max=self.epsilon_high)`，但它的 `epsilon_high` **默认等于 `epsilon`**（0.2）：
# 照搬 TRL 的默认配置跑 `cispo`，上限就是 0.2，几乎所有概率比都被封顶；TRL 文档建议 `cispo` 时显式设
# `epsilon_high=5.0`（第 3b 课的核对会实测这一点）。**CISPO 的原始论文用的是另一种记号**：MiniMax-M1
# （arXiv 2506.13585，第 3.1 节式 (4)–(5)）把截断后的权重写成 $\hat r = \mathrm{clip}(r,\ 1-\varepsilon^{IS}_{low},\ 1+\varepsilon^{IS}_{high})$，
# 上限是 `1 + ε_high`（与 DAPO 的 clip-higher 同样是“半径”记号），论文实验里不设下限、只调 $\varepsilon^{IS}_{high}$；
# 它的归约是全批词元平均 $1/\sum_i |o_i|$，不是回答等权。ScaleRL（arXiv 2510.13786）则写成 `clip(r, 0, ε_max)`，
# 与 MiniMind、TRL 一样是绝对上限。同一个 5.0 在半径记号下意味着上限 6；读别人的配置时先确认是哪一种。
#
# 提示：先 `valid = check_policy_inputs(...)`，再检查 `epsilon_high > 0`；和 TODO 1 一样**先掩码再 exp**
# （概率比、乘在权重后面的 `policy_logps`、KL 的输入都先用 `torch.where(valid, ..., 0.0)` 挡住 padding）；
# 旧对数概率同样是采样时的常数，先 `old_logps.detach()`；权重是 `torch.clamp(ratio, max=epsilon_high).detach()`。

# %% nbgrader={"solution": true, "grade_id": "cispo_policy_loss"}
#@save
def cispo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon_high=5.0, beta=0.0, ref_logps=None):
    """CISPO 策略损失（MiniMind 的 loss_type="cispo"）。

    参数与 grpo_policy_loss 相同，只是裁剪参数换成 epsilon_high：比率的**绝对**上限（> 0，本课默认 5.0，
    MiniMind 的记号），截断后的比率不参与求导（detach），梯度只经过 policy_logps。
    返回：标量张量，归约方式与 grpo_policy_loss 相同（回答内有效词元均值，再对回答求均值）；
    被 mask 的位置不影响损失和梯度。
    违反输入契约（形状、mask 取值、epsilon_high <= 0、beta、ref_logps）时抛出 ValueError。
    """
    ### BEGIN SOLUTION
    valid = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    if not epsilon_high > 0:
        raise ValueError(f"epsilon_high（比率的绝对上限）必须 > 0，实际为 {epsilon_high}")
    zero = torch.zeros_like(policy_logps)  # [B*G, T]
    log_ratio = torch.where(valid, policy_logps - old_logps.detach(), zero)  # [B*G, T] masked before exp (C3)
    clamped_ratio = torch.clamp(torch.exp(log_ratio), max=epsilon_high).detach()  # [B*G, T]
    safe_policy = torch.where(valid, policy_logps, zero)  # [B*G, T]
    per_token_loss = -clamped_ratio * advantages.to(zero.dtype).unsqueeze(1) * safe_policy  # [B*G, T]
    if beta != 0.0:
        safe_ref = torch.where(valid, ref_logps.to(zero.dtype), zero)  # [B*G, T]
        per_token_loss = per_token_loss + beta * token_kl_penalty(safe_policy, safe_ref)  # [B*G, T]
    mask = valid.to(per_token_loss.dtype)  # [B*G, T]
    per_sequence = (per_token_loss * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # [B*G]
    return per_sequence.mean()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_cispo_policy_loss", "points": 4}
"""检查 cispo_policy_loss：绝对上限、detach 后的梯度、KL 项、归约、padding 上的极端值与输入契约（可见测试）。"""
from tools.grading import assert_close, expect_value_error

# 比率 [1.5, 0.5, 7.0]，上限 5.0 -> 权重 [1.5, 0.5, 5.0]；policy_logps = [-0.2, -1.0, -0.5]
_policy = torch.tensor([[-0.2, -1.0, -0.5], [-0.2, -1.0, -0.5]], dtype=torch.float64, requires_grad=True)
_old = _policy.detach() - torch.log(torch.tensor([1.5, 0.5, 7.0], dtype=torch.float64))
_adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
_mask = torch.tensor([[True, True, True], [True, True, False]])
_loss = cispo_policy_loss(_policy, _old, _adv, _mask, epsilon_high=5.0)
_expected = (-(1.5 * -0.2 + 0.5 * -1.0 + 5.0 * -0.5) / 3 + (1.5 * -0.2 + 0.5 * -1.0) / 2) / 2
assert_close(_loss, torch.tensor(_expected, dtype=torch.float64), what="CISPO 损失（绝对上限 5.0）")
_loss.backward()
# detach 之后，对 log π 的梯度就是 -min(r, 5)·A /（回答词元数 × 回答条数），包括比率为 7 的词元
_expected_grad = torch.tensor([[-1.5 / 6, -0.5 / 6, -5.0 / 6], [1.5 / 4, 0.5 / 4, 0.0]], dtype=torch.float64)
assert_close(_policy.grad, _expected_grad, what="CISPO 损失对 policy_logps 的梯度（权重应 detach）")

_ref = _policy.detach() + 0.2
_with_kl = cispo_policy_loss(_policy.detach(), _old, _adv, _mask, epsilon_high=5.0, beta=0.5, ref_logps=_ref)
_kl = math.exp(0.2) - 0.2 - 1.0
assert_close(_with_kl, torch.tensor(_expected + 0.5 * _kl, dtype=torch.float64), what="带 KL 的 CISPO 损失")
assert_close(cispo_policy_loss(_policy.detach(), _old, _adv, _mask.double()), _loss.detach(), what="0/1 浮点 mask 的 CISPO 损失")

# padding 位置（第 1 行第 2 个）放极端值：对数比率 800、参考对数概率 -800。损失与梯度必须不变
_policy_big = _policy.detach().clone()
_policy_big[1, 2] = _old[1, 2] + 800.0
_ref_big = _ref.clone()
_ref_big[1, 2] = -800.0
_leaf_big = _policy_big.clone().requires_grad_(True)
_leaf_ok = _policy.detach().clone().requires_grad_(True)
_loss_big = cispo_policy_loss(_leaf_big, _old, _adv, _mask, beta=0.5, ref_logps=_ref_big)
_loss_ok = cispo_policy_loss(_leaf_ok, _old, _adv, _mask, beta=0.5, ref_logps=_ref)
assert_close(_loss_big, _loss_ok.detach(), what="padding 上是极端值时的 CISPO 损失（应有限且不变）")
_loss_big.backward()
_loss_ok.backward()
assert_close(_leaf_big.grad, _leaf_ok.grad, what="padding 上是极端值时 CISPO 的梯度（出现 nan 说明先 exp 后 mask 了）")

expect_value_error(lambda: cispo_policy_loss(_policy, _old, _adv, _mask, epsilon_high=0.0), "epsilon_high <= 0")
expect_value_error(lambda: cispo_policy_loss(_policy, _old.T, _adv, _mask), "old_logps 形状不一致")
expect_value_error(lambda: cispo_policy_loss(_policy, _old, _adv, _mask, beta=0.1), "beta > 0 但没有 ref_logps")
print("cispo_policy_loss 可见测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb03a_cispo_trace_lab", "test_cispo_policy_loss", globals())
### END HIDDEN TESTS

# %% [markdown]
# ## 第 4 步　梯度在哪里消失
#
# 只看一个词元（一条只有 1 个有效词元的回答，`β = 0`），把 `r` 从 0.3 扫到 2.2，画出损失对 `log π` 的
# 导数 `∂L/∂ℓ^θ`。因为 `∂r/∂ℓ^θ = r`，GRPO 未裁剪时导数是 `−A·r`，被裁剪时是 0；CISPO 处处是
# `−min(r, ε_high)·A`。下面的图直接用**你写的**两个函数加自动求导算出来（`ε = 0.2`，`ε_high = 5.0`）。

# %% nbgrader={"locked": true, "grade_id": "gradient_figure"}
def per_token_gradient(loss_fn, ratios, advantage, **kwargs):
    """d loss / d log pi for one-token completions, one completion per ratio (uses the learner's loss)."""
    n = ratios.numel()
    policy = torch.full((n, 1), -1.0, dtype=torch.float64, requires_grad=True)  # [N, 1]
    old = policy.detach() - torch.log(ratios.double()).view(n, 1)  # [N, 1]
    advantages = torch.full((n,), float(advantage), dtype=torch.float64)  # [N]
    mask = torch.ones(n, 1, dtype=torch.bool)  # [N, 1]
    loss = loss_fn(policy, old, advantages, mask, **kwargs) * n  # undo the mean over completions
    (grad,) = torch.autograd.grad(loss, policy)
    return grad.view(n)  # [N]


ratio_grid = torch.linspace(0.3, 2.2, 191, dtype=torch.float64)  # [N]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=False)
for ax, advantage in zip(axes, (1.0, -1.0)):
    g_grpo = per_token_gradient(grpo_policy_loss, ratio_grid, advantage, epsilon=0.2)
    g_cispo = per_token_gradient(cispo_policy_loss, ratio_grid, advantage, epsilon_high=5.0)
    vanished = (g_grpo == 0)
    ax.axvspan(0.8, 1.2, color="0.92", label="clip range [1-eps, 1+eps]")
    ax.plot(ratio_grid, g_cispo, color="tab:orange", lw=2.5, label="CISPO")
    ax.plot(ratio_grid, g_grpo, color="tab:blue", lw=1.8, ls="--", label="GRPO")
    ax.scatter(ratio_grid[vanished], g_grpo[vanished], s=6, color="tab:red", zorder=3, label="GRPO gradient = 0")
    ax.axhline(0.0, color="k", lw=0.6)
    ax.set_title(f"A = {advantage:+.0f}")
    ax.set_xlabel("ratio r = pi / pi_old")
    ax.set_ylabel("dL / d log pi")
    ax.legend(fontsize=8)
fig.tight_layout()
show_figure(fig)
for advantage in (1.0, -1.0):
    g = per_token_gradient(grpo_policy_loss, ratio_grid, advantage, epsilon=0.2)
    dead = ratio_grid[g == 0]
    print(f"A={advantage:+.0f}: GRPO 梯度为 0 的比率范围 [{dead.min():.2f}, {dead.max():.2f}]（网格上 {dead.numel()} 个点）")

# %% [markdown]
# 图里可以读出：`A > 0` 时 GRPO 只在 `r > 1+ε` 一侧“死掉”（已经足够提高这个词元的概率，不再继续推），
# `A < 0` 时只在 `r < 1−ε` 一侧死掉；另一侧没有裁剪，梯度照常流动。CISPO 在整个范围内梯度都不为 0，
# 只是 `r > ε_high` 时权重封顶。
#
# **计算题（自动评分）。** 对下面 4 个单词元情形（`ε = 0.2`，`ε_high = 5.0`，`β = 0`，批里只有这一条回答），
# 写出 `∂L/∂ℓ^θ` 的数值。把答案写成函数 `gradient_answers(advantage, ratio)`，返回 `(GRPO 的导数, CISPO 的导数)`
# （两个 Python 数）：下表的情形 `"a"` 就是 `gradient_answers(1.0, 1.5)`，评分时还会用别的 `A` 与 `r` 检查同一个函数。
# 可见测试会先告诉你下表 4 个情形每个导数的**正负号**（或是否为 0）对不对，具体数值由隐藏测试评分。
#
# | 情形 | A | r |
# | --- | --- | --- |
# | `"a"` | +1 | 1.5 |
# | `"b"` | −1 | 0.5 |
# | `"c"` | −1 | 1.5 |
# | `"d"` | +1 | 0.5 |

# %% nbgrader={"solution": true, "grade_id": "gradient_answers"}
def gradient_answers(advantage, ratio):
    """单词元、批里只有这一条回答（ε = 0.2，ε_high = 5.0，β = 0）时 ∂L/∂ℓ^θ：(GRPO 的导数, CISPO 的导数)。"""
    ### BEGIN SOLUTION
    epsilon, epsilon_high = 0.2, 5.0
    # GRPO: min(r A, clip(r) A); the clipped branch (a constant) is chosen on the side A pushes past the range
    clipped = (advantage > 0 and ratio > 1 + epsilon) or (advantage < 0 and ratio < 1 - epsilon)
    grpo = 0.0 if clipped else -advantage * ratio  # d(r A)/d log pi = r A
    cispo = -advantage * min(ratio, epsilon_high)  # the capped weight is detached: only log pi carries the gradient
    return (float(grpo), float(cispo))
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_gradient_answers", "points": 2}
"""检查“梯度在哪里消失”的计算题：4 个情形的 GRPO / CISPO 导数（可见部分检查格式和每个导数的正负号，数值由隐藏测试评分）。"""
_situations = {"a": (1.0, 1.5), "b": (-1.0, 0.5), "c": (-1.0, 1.5), "d": (1.0, 0.5)}  # (A, r) of the table
_answers = {_key: gradient_answers(*_situation) for _key, _situation in _situations.items()}
for _key, _pair in _answers.items():
    assert isinstance(_pair, tuple) and len(_pair) == 2 and all(isinstance(v, (int, float)) for v in _pair), \
        f"情形 {_key} 的答案应是两个数组成的元组 (GRPO 导数, CISPO 导数)"


def _sign(value):
    return 0 if abs(value) < 1e-9 else (1 if value > 0 else -1)


# 可见信号：每个导数的正负号（0 表示梯度消失）。∂L/∂ℓ = −A·r（未裁剪），所以 A>0 时为负、A<0 时为正
_expected_signs = {"a": (0, -1), "b": (0, 1), "c": (1, 1), "d": (-1, -1)}
for _key, (_g_sign, _c_sign) in _expected_signs.items():
    _got = tuple(_sign(float(v)) for v in _answers[_key])
    _names = {0: "0（梯度消失）", 1: "正", -1: "负"}
    assert _got == (_g_sign, _c_sign), (
        f"情形 {_key}：导数的正负号应是 (GRPO {_names[_g_sign]}, CISPO {_names[_c_sign]})，你的答案是 "
        f"(GRPO {_names[_got[0]]}, CISPO {_names[_got[1]]})。提示：看上面的图，以及 min 在哪一侧选中了裁剪分支")
print("格式与正负号正确；数值由隐藏测试评分")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb03a_cispo_trace_lab", "test_gradient_answers", globals())
### END HIDDEN TESTS

# %% [markdown]
# ## 第 5 步　追踪实验（MiniMind trace lab）
#
# MiniMind 第 24 课的追踪实验：固定随机种子，构造 `B = 2` 个提示、每个 `G = 4` 条回答的平铺奖励，其中第 2 组
# 的奖励全部相同（“退化组”）；再构造旧策略、当前策略和 reference 的逐词元对数概率与变长掩码，依次打印
# 中间量。要观察的是：
#
# - 每组 `advantages` 的均值接近 0；退化组的 `advantages` 全部约为 0（分子为 0，分母是 `0 + eps`）；
# - GRPO 与 CISPO 用的是**同一个**概率比和**同一个** KL（`ratio_min`、`ratio_max`、`kl_mean` 与 `loss_type` 无关），
#   但两个损失的值不同。

# %% nbgrader={"locked": true, "grade_id": "trace_lab"}
def trace_grpo_cispo(seed=24, num_prompts=2, num_generations=4, max_len=6, beta=0.04):
    """MiniMind-style trace: print the intermediate tensors of one GRPO / CISPO loss computation."""
    gen = torch.Generator().manual_seed(seed)
    n = num_prompts * num_generations
    rewards = torch.round(torch.rand(n, generator=gen) * 100) / 100  # [B*G]
    rewards[num_generations:2 * num_generations] = 0.5  # a degenerate group: every reward equal
    old_logps = -torch.rand(n, max_len, generator=gen) * 2.0 - 0.1  # [B*G, T]
    policy_logps = old_logps + 0.3 * torch.randn(n, max_len, generator=gen)  # [B*G, T]
    ref_logps = old_logps + 0.1 * torch.randn(n, max_len, generator=gen)  # [B*G, T]
    lengths = torch.randint(2, max_len + 1, (n,), generator=gen)  # [B*G]
    completion_mask = torch.arange(max_len)[None, :] < lengths[:, None]  # [B*G, T]

    grouped_rewards = rewards.view(-1, num_generations)  # [B, G]
    group_mean = grouped_rewards.mean(dim=1)  # [B]
    group_std = grouped_rewards.std(dim=1, unbiased=False)  # [B]
    advantages = group_relative_advantages(rewards, num_generations)  # [B*G]
    ratio = torch.exp(policy_logps - old_logps)[completion_mask]  # [valid tokens]
    kl = token_kl_penalty(policy_logps, ref_logps)[completion_mask]  # [valid tokens]
    grpo_loss = grpo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon=0.2, beta=beta, ref_logps=ref_logps)
    cispo_loss = cispo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon_high=5.0, beta=beta, ref_logps=ref_logps)
    print("grouped_rewards =\n", grouped_rewards)
    print("group_mean =", group_mean)
    print("group_std =", group_std)
    print("advantages =", advantages)
    print("advantages 的组内均值 =", advantages.view(-1, num_generations).mean(dim=1))
    print("completion 长度 =", lengths.tolist())
    print(f"ratio_min = {ratio.min().item():.4f}")
    print(f"ratio_max = {ratio.max().item():.4f}")
    print(f"kl_mean = {kl.mean().item():.4f}")
    print(f"grpo_loss = {grpo_loss.item():.4f}")
    print(f"cispo_loss = {cispo_loss.item():.4f}")
    return {"grpo_loss": grpo_loss.item(), "cispo_loss": cispo_loss.item()}


trace = trace_grpo_cispo()

# %% [markdown]
# ## 第 6 步　本节检查（8 题）
#
# 8 题对应 MiniMind 第 24 课的检查清单（损失家族的第 9 题在第 3b 课）。
# 选择题和数值题自动评分；简答题由老师按要点人工评分（nbgrader 的 manual grading），用自己的话写 2～4 句即可。
# Q8 的可见测试会告诉你一个已知的选项对不对，其余由隐藏测试评分。

# %% [markdown] nbgrader={"solution": true, "grade": true, "grade_id": "q1_no_critic", "points": 2}
# **Q1（简答）GRPO 为什么可以不训练 critic？**
#
# ### BEGIN SOLUTION
# 参考要点：PPO 的 critic 只是为了给优势提供一个基线 `V(s)`。GRPO 对同一个提示采样 `G` 条回答，用这组回答
# 奖励的均值（再除以组内标准差）当基线：比同组平均好的回答优势为正、差的为负。基线来自同题的其他样本，
# 不需要额外的价值网络、value loss 和 GAE；代价是每个提示要多采样几条回答，而且优势只有序列级。
# ### END SOLUTION

# %% [markdown]
# **Q2（数值）** 平铺的 `rewards` 用 `rewards.view(-1, G)` 分组，这依赖于同一个提示的回答连续排列。
# 若 `B = 3`、`G = 4`，第 `i = 1` 个提示的第 `j = 2` 条回答（都从 0 开始数）在平铺张量里的下标是多少？
# 把答案写成函数 `q2_flat_index(i, j, num_generations)`（返回 Python 整数）：本题就是 `q2_flat_index(1, 2, 4)`，
# 评分时还会用别的 `i`、`j`、`G` 检查同一个函数。

# %% nbgrader={"solution": true, "grade_id": "q2_answer"}
def q2_flat_index(i, j, num_generations):
    """第 i 个提示的第 j 条回答（都从 0 开始数）在平铺张量 [B*G] 里的下标。"""
    ### BEGIN SOLUTION
    return i * num_generations + j
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_q2", "points": 1}
"""检查 Q2：平铺布局中第 i 个提示的第 j 条回答的下标（可见部分只检查类型，数值由隐藏测试在别的 i、j、G 上评分）。"""
assert isinstance(q2_flat_index(1, 2, 4), int), "q2_flat_index 应返回整数"
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb03a_cispo_trace_lab", "test_q2", globals())
### END HIDDEN TESTS

# %% [markdown]
# **Q3（选择）** 若同一组的 `G` 个奖励完全相同，按 `(R − mean) / (std + 1e-4)` 计算的优势会怎样？
# 把选项字母赋给 `q3_choice`。
#
# - A. 全部是 0：分子为 0，分母是 `1e-4`，这一组对策略梯度（β = 0 时）没有贡献
# - B. 全部是 NaN：标准差为 0，发生除零
# - C. 一半 +1、一半 −1
# - D. 等于奖励本身的大小

# %% nbgrader={"solution": true, "grade_id": "q3_answer"}
q3_choice = None
### BEGIN SOLUTION
q3_choice = "A"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_q3", "points": 1}
"""检查 Q3：退化组的优势。"""
if q3_choice is None:
    raise NotImplementedError("请先回答 Q3")
assert q3_choice in ("A", "B", "C", "D"), "q3_choice 应是 'A'、'B'、'C'、'D' 之一"
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb03a_cispo_trace_lab", "test_q3", globals())
### END HIDDEN TESTS

# %% [markdown] nbgrader={"solution": true, "grade": true, "grade_id": "q4_broadcast", "points": 2}
# **Q4（简答）** 为什么 `advantages.unsqueeze(1)` 可以乘到这条回答的每个词元上？这样做意味着什么？
#
# ### BEGIN SOLUTION
# 参考要点：GRPO 的优势是序列级的——奖励只对整条回答打一次分，组内标准化后每条回答一个数，形状 `[B*G]`。
# `unsqueeze(1)` 把它变成 `[B*G, 1]`，按广播规则复制到 `[B*G, T]` 的每个词元位置：同一条回答的所有词元共享
# 同一份“功劳/过错”，没有 critic 那样的逐词元信用分配；padding 之后的位置再由掩码去掉。
# ### END SOLUTION

# %% [markdown]
# **Q5（选择）** `per_token_kl = exp(ref − policy) − (ref − policy) − 1` 约束的是什么？把字母赋给 `q5_choice`。
#
# - A. 当前策略与采样时旧策略的距离（这由概率比和裁剪负责）
# - B. 当前策略与冻结的 reference（通常是 SFT 模型）的距离，按词元计、非负
# - C. 当前策略与奖励模型的距离
# - D. 新旧两次采样的奖励差

# %% nbgrader={"solution": true, "grade_id": "q5_answer"}
q5_choice = None
### BEGIN SOLUTION
q5_choice = "B"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_q5", "points": 1}
"""检查 Q5：reference KL 约束的对象。"""
if q5_choice is None:
    raise NotImplementedError("请先回答 Q5")
assert q5_choice in ("A", "B", "C", "D"), "q5_choice 应是 'A'、'B'、'C'、'D' 之一"
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb03a_cispo_trace_lab", "test_q5", globals())
### END HIDDEN TESTS

# %% [markdown] nbgrader={"solution": true, "grade": true, "grade_id": "q6_ppo_similarity", "points": 2}
# **Q6（简答）** GRPO 的损失和 PPO 的策略损失哪里相似、哪里不同？
#
# ### BEGIN SOLUTION
# 参考要点：相同之处——都用新旧策略的逐词元概率比`r = π_θ/π_old` 做重要性采样，都用
# `min(r·A, clip(r, 1−ε, 1+ε)·A)` 的保守（悲观）裁剪目标限制一次更新走多远，都需要采样时保存的 old logprob。
# 不同之处——GRPO 的优势来自组内相对奖励（序列级、广播到词元），PPO 的来自 critic + GAE（词元级）；
# GRPO 没有 value loss，通常把 reference KL 作为损失里的一项，而不是像经典 RLHF-PPO 那样并进奖励。
# ### END SOLUTION

# %% [markdown] nbgrader={"solution": true, "grade": true, "grade_id": "q7_cispo_detach", "points": 2}
# **Q7（简答）** CISPO 为什么要对 `clamped_ratio` 调用 `.detach()`？
#
# ### BEGIN SOLUTION
# 参考要点：CISPO 想让截断后的概率比只当作一个**固定的重要性权重**，梯度全部经过 `log π`：
# `∂L/∂ℓ = −min(r, ε_high)·A`，即使概率比超过上限，梯度也只是被封顶而不会消失（第 4 步的图）。如果不 detach，
# 未截断时会多出一条经过 `r` 本身的梯度（导数变成 `−r·A·(1+ℓ)`，依赖 logprob 的绝对大小，甚至可能变号），
# 截断时这条路径又变成 0，目标就不再是“以封顶概率比加权的策略梯度”。
# ### END SOLUTION

# %% [markdown]
# **Q8（多选）** 在 MiniMind 里把 `loss_type` 从 `"grpo"` 改成 `"cispo"`，下列哪些步骤**不变**？
# 把字母组成的集合赋给 `q8_unchanged`，例如 `{"a", "b"}`。
#
# - a. 每个提示采样 `num_generations` 条回答
# - b. 奖励的计算
# - c. 组内相对优势
# - d. 回答掩码（截到第一个 EOS）
# - e. 概率比 `exp(policy − old)`
# - f. reference KL
# - g. 策略项的写法
# - h. 归约：先回答内有效词元均值，再对回答求均值

# %% nbgrader={"solution": true, "grade_id": "q8_answer"}
q8_unchanged = None
### BEGIN SOLUTION
q8_unchanged = {"a", "b", "c", "d", "e", "f", "h"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_q8", "points": 1}
"""检查 Q8：切换 loss_type 时不变的步骤（可见部分检查格式和一个已知选项 a，其余由隐藏测试评分）。"""
if q8_unchanged is None:
    raise NotImplementedError("请先回答 Q8")
assert isinstance(q8_unchanged, (set, frozenset)) and q8_unchanged <= set("abcdefgh"), "q8_unchanged 应是 'a'～'h' 组成的集合"
assert "a" in q8_unchanged, "已知的一项：每个 prompt 采样 num_generations 条回答（a）与 loss_type 无关，应在集合里"
print("格式正确、已知选项 a 正确；其余选项由隐藏测试评分")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb03a_cispo_trace_lab", "test_q8", globals())
### END HIDDEN TESTS

# %% nbgrader={"locked": true, "grade_id": "runtime_report"}
print(f"本次从第一个共享部件单元运行到这里用了 {time.perf_counter() - LESSON_STARTED:.1f} 秒（本机、本次负载下的实测值，不含内核启动）")

# %% [markdown]
# ---
#
# # 🛑 STOP HERE 🛑
#
# 本课到此结束（包括上面的简答题）。提交前从头到尾重新运行一遍（Kernel → Restart & Run All），
# 确认每个可见测试都打印了“通过”或“正确”。下一课是第 3b 课：损失家族、GSPO 与 TRL 一致性核对。

# %% [markdown] tags=["solution-only"]
# ## 解析
#
# - **GRPO 的梯度为什么会消失。** `min(r·A, clip(r)·A)` 是逐元素的最小值：当 `A > 0` 且 `r > 1+ε`（或 `A < 0` 且
#   `r < 1−ε`）时，最小值取到常数分支，这个词元对损失的导数就是 0。这是故意的“保守”设计——这一步已经
#   朝有利方向走得够远了。代价是这些词元在本次更新里完全不提供信号；在长回答、低概率词元较多时，被
#   “关掉”的词元可能很多。
# - **CISPO 的取舍。** 它保留所有词元的梯度，只把重要性权重封顶并当作常数。权重封顶控制了方差，detach
#   让梯度的形式保持为“加权的 `∇log π`”。常见错误有两个：忘记 `detach`（梯度多出一条经过概率比的路径，隐藏测试的
#   梯度比较会失败），以及把上限写成 `1 + ε_high`（在概率比介于 `ε_high` 与 `1 + ε_high` 之间时数值不同）。
# - **先掩码再 exp。** padding 位置的对数概率没有意义，可能是任何有限值。`exp` 之后再乘掩码，前向值看起来
#   可能没问题，反向传播却会把 `0 × inf` 变成 NaN，污染整个参数的梯度。先用 `torch.where` 把对数概率比置 0，
#   `exp(0) = 1` 永远有限。
# - **追踪实验。** 退化组（奖励全相同）的优势全为 0，不提供策略梯度；概率比与 KL 与 `loss_type` 无关，两个损失
#   只在策略项上不同。
