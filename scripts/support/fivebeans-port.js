// Loaded with `node -r` before fivebeans' own mocha suite: the suite connects to beanstalkd's
// default address (127.0.0.1 or localhost, port 11300) and asserts that its clients keep that
// host and port, so the port cannot be changed in its configuration. This hook changes only
// where those TCP connections really go: to 127.0.0.1:$DELAYQ_BEANSTALK_PORT, a private port
// where `delayq beanstalkd` listens. Every byte of the protocol is fivebeans' and delayq's.
'use strict';
const net = require('net');

const target = Number(process.env.DELAYQ_BEANSTALK_PORT);
if (!Number.isInteger(target) || target <= 0) {
  throw new Error('DELAYQ_BEANSTALK_PORT must name the port delayq listens on');
}
const isDefault = (port, host) =>
  Number(port) === 11300 && (host === undefined || host === '127.0.0.1' || host === 'localhost');

const createConnection = net.createConnection;
net.createConnection = function (port, host, ...rest) {
  if (typeof port === 'object' && port !== null) {
    if (isDefault(port.port, port.host)) {
      port = Object.assign({}, port, { port: target, host: '127.0.0.1' });
    }
    return createConnection.call(this, port, host, ...rest);
  }
  if (isDefault(port, typeof host === 'string' ? host : undefined)) {
    return createConnection.call(this, target, '127.0.0.1', ...(typeof host === 'string' ? rest : [host, ...rest]));
  }
  return createConnection.call(this, port, host, ...rest);
};
net.connect = net.createConnection;
