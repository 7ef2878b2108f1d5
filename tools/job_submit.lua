-- Tiresias' job_submit/lua plugin: every job submitted to a partition Tiresias manages is
-- held at submission (priority 0), so Slurm never starts one before the coordinator decides;
-- the coordinator adopts it and releases it when its turn comes (docs/slurm.md). Its own
-- jobs (named "tiresias:<job key>", submitted held anyway) pass untouched.
-- Install: JobSubmitPlugins=lua in slurm.conf, this file as job_submit.lua beside it, with
-- MANAGED naming the partitions and DEFAULT the cluster's default partition.

local MANAGED = { tiresias = true }
local DEFAULT = "tiresias"
-- What the coordinator reads to tell a job this plugin held from one its user held.
local MARK = "tiresias: held at submission"

function slurm_job_submit(job_desc, part_list, submit_uid)
    local name = job_desc.name or ""
    if string.sub(name, 1, 9) == "tiresias:" then
        return slurm.SUCCESS
    end
    for partition in string.gmatch(job_desc.partition or DEFAULT, "[^,]+") do
        if MANAGED[partition] then
            job_desc.priority = 0
            job_desc.admin_comment = MARK
            return slurm.SUCCESS
        end
    end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end
