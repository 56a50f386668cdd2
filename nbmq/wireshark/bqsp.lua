-- BQSP over TCP (seed 002): a 7-byte little-endian header (data_size u32, data_type u16,
-- queue u8), then data_size bytes of data. BQSP names no port: set it in the preferences
-- (Protocols > BQSP > TCP port, or `tshark -o bqsp.tcp_port:7701`); 0 registers none.
-- Packets split over TCP segments are reassembled with dissect_tcp_pdus.
-- Filters: bqsp.data_type, bqsp.queue, bqsp.length, bqsp.data.

local bqsp = Proto("bqsp", "BQSP (queue-numbered packets over TCP)")
local HEADER = 7

local f = {
  length    = ProtoField.uint32("bqsp.length", "Data size", base.DEC),
  data_type = ProtoField.uint16("bqsp.data_type", "Data type", base.HEX_DEC),
  queue     = ProtoField.uint8("bqsp.queue", "Queue", base.DEC),
  data      = ProtoField.bytes("bqsp.data", "Data"),
}
bqsp.fields = f
bqsp.prefs.tcp_port = Pref.uint("TCP port", 0, "TCP port of the BQSP service (0: none)")

local function pdu_length(tvb, pinfo, offset)
  return HEADER + tvb(offset, 4):le_uint()
end

local function dissect_pdu(tvb, pinfo, tree)
  pinfo.cols.protocol = "BQSP"
  local size = tvb(0, 4):le_uint()
  local t = tree:add(bqsp, tvb(), "BQSP packet")
  t:add_le(f.length, tvb(0, 4))
  t:add_le(f.data_type, tvb(4, 2))
  t:add_le(f.queue, tvb(6, 1))
  if size > 0 then t:add(f.data, tvb(HEADER, size)) end
  t:append_text(string.format(", type 0x%04x, queue %d, %d bytes", tvb(4, 2):le_uint(), tvb(6, 1):uint(), size))
  pinfo.cols.info:append(string.format("[type 0x%04x queue %d len %d] ", tvb(4, 2):le_uint(), tvb(6, 1):uint(), size))
  return tvb:len()
end

function bqsp.dissector(tvb, pinfo, tree)
  pinfo.cols.info = ""
  dissect_tcp_pdus(tvb, tree, HEADER, pdu_length, dissect_pdu, true)
  return tvb:len()
end

local registered = 0
function bqsp.prefs_changed()
  local tcp = DissectorTable.get("tcp.port")
  if registered ~= 0 then tcp:remove(registered, bqsp) end
  registered = bqsp.prefs.tcp_port
  if registered ~= 0 then tcp:add(registered, bqsp) end
end

DissectorTable.get("tcp.port"):add_for_decode_as(bqsp)
